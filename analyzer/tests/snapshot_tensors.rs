//! The real PyTorch snapshots with a history, read as a run: the tensor peak, who held
//! the most at it, and who held the memory at an out-of-memory failure, each checked
//! against a replay written here in Python over Python's own `pickle`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/torch-snapshots")
}

/// The snapshots that have a history.
const WITH_HISTORY: &[&str] = &["EoR_NN_snapshot.pickle", "silmont_mem_snapshot.pickle"];

/// An independent replay: the tensors alive before the history are the final blocks
/// (not inactive) rewound through it; a tensor counts its requested bytes from `alloc` to
/// `free_completed`. At the first moment of the most bytes, the tensors are summed by
/// their innermost Python frame outside torch, site-packages and the standard library
/// (any Python frame where there is none). With `oom_at_peak`, it also writes the
/// snapshot again with an `oom` entry right after that moment, to OUT.
const REPLAY: &str = r#"
import json, pickle, sys
src, out = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
snap = pickle.load(open(src, "rb"))
result = []
for dev, trace in enumerate(snap["device_traces"]):
    if not trace:
        continue
    alive = {}
    for seg in snap["segments"]:
        if seg["device"] != dev:
            continue
        for b in seg["blocks"]:
            if b["state"] != "inactive":
                alive[b["address"]] = (b["requested_size"], b["frames"])
    for e in reversed(trace):
        if e["action"] == "alloc":
            del alive[e["addr"]]
        elif e["action"] == "free_completed":
            alive[e["addr"]] = (e["size"], [])
    live = sum(r for r, _ in alive.values())
    peak, at_peak, peak_index = live, dict(alive), -1
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            alive[e["addr"]] = (e["size"], e["frames"])
            live += e["size"]
        elif e["action"] == "free_completed":
            live -= alive.pop(e["addr"])[0]
        if live > peak:
            peak, at_peak, peak_index = live, dict(alive), i
    by = {}
    for r, frames in at_peak.values():
        w = who(frames)
        if w:
            by[w] = by.get(w, 0) + r
    top = max(by.items(), key=lambda kv: kv[1])
    result.append({"device": dev, "peak": peak, "function": top[0][0], "file": top[0][1],
                   "function_bytes": top[1], "tensors": len(at_peak)})
    if out:
        trace.insert(peak_index + 1, {"action": "oom", "addr": 0, "size": 1 << 40,
            "stream": 0, "time_us": trace[peak_index]["time_us"], "device_free": 12345,
            "frames": [{"filename": "/home/me/train.py", "line": 7, "name": "step"}]})
        pickle.dump(snap, open(out, "wb"), protocol=4)
print(json.dumps(result))
"#;

fn replay(snapshot: &Path, oom_copy: Option<&Path>) -> Vec<Value> {
    let mut args = vec![snapshot];
    args.extend(oom_copy);
    common::python_list(&[common::PY_WHO, REPLAY].concat(), &args)
}

/// The HTML report of `path`.
fn report(path: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("run.html");
    common::vramtrace_ok(&[
        "report",
        "-o",
        html.to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    std::fs::read_to_string(&html).unwrap()
}

fn view(args: &[&str], path: &Path) -> Value {
    let out = common::vramtrace_ok(&[args, &[path.to_str().unwrap()]].concat());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn peak_gives_the_tensor_peak_and_the_function_holding_the_most() {
    if common::fixtures().is_none() {
        return;
    }
    for name in WITH_HISTORY {
        let path = fixtures().join(name);
        let truth = replay(&path, None);
        let peak = view(&["peak", "--json"], &path);
        let summary = view(&["summary", "--json"], &path);
        for t in &truth {
            let gpu = t["device"].to_string();
            let d = peak["devices"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["gpu"] == gpu.as_str())
                .unwrap_or_else(|| panic!("{name}: GPU {gpu} in {peak}"));
            assert_eq!(d["layer"], "allocated", "{name}");
            assert_eq!(d["live_bytes"], t["peak"], "{name}: the tensor peak");
            assert_eq!(
                d["live_blocks"], t["tensors"],
                "{name}: tensors at the peak"
            );
            let top = &d["top_function"];
            assert_eq!(top["function"], t["function"], "{name}: {top}");
            assert_eq!(top["file"], t["file"], "{name}: {top}");
            assert_eq!(top["bytes"], t["function_bytes"], "{name}: {top}");
            let s = process_device(&summary, &t["device"]);
            assert_eq!(s["peak_requested_bytes"], t["peak"], "{name}");
            let gpu_row = &summary["devices"][0];
            assert_eq!(gpu_row["peak_requested_bytes"], t["peak"], "{name}");
            let held: u64 = gpu_row["tensors_at_peak"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(Some(held), t["peak"].as_u64(), "{name}");
        }
    }
}

#[test]
fn summary_gives_the_peak_of_block_sizes() {
    if common::fixtures().is_none() {
        return;
    }
    for name in WITH_HISTORY {
        let path = fixtures().join(name);
        let truth = common::python_list(common::BLOCK_SIZES, &[&path]);
        let summary = view(&["summary", "--json"], &path);
        for t in &truth {
            // The Python replay reproduces every final block it can check.
            assert!(t["checked"].as_u64().unwrap() > 0, "{name}: {t}");
            assert_eq!(t["wrong"], 0, "{name}: {t}");
            assert_eq!(t["unknown_before"], 0, "{name}: {t}");
            let s = process_device(&summary, &t["device"]);
            assert_eq!(s["peak_allocated_bytes"], t["peak_allocated"], "{name}");
            // Block sizes are rounded up: never less than what was asked for.
            assert!(
                s["peak_allocated_bytes"].as_u64() >= s["peak_requested_bytes"].as_u64(),
                "{name}: {s}"
            );
        }
    }
}

#[test]
fn the_report_shows_the_tensors_at_their_peak() {
    if common::fixtures().is_none() {
        return;
    }
    let path = fixtures().join(WITH_HISTORY[0]);
    let truth = replay(&path, None);
    let text = report(&path);
    let peak = truth[0]["peak"].as_u64().unwrap();
    let heading = format!(
        "tensors at their peak, {} requested",
        vramtrace_analyzer::units::bytes(peak)
    );
    assert!(text.contains(&heading), "{heading}");
    assert!(text.contains(truth[0]["function"].as_str().unwrap()));
}

#[test]
fn oom_names_who_held_the_memory_at_the_failure() {
    if common::fixtures().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in WITH_HISTORY {
        let copy = dir.path().join(format!("oom-{name}"));
        let truth = replay(&fixtures().join(name), Some(&copy));
        let oom = view(&["oom", "--json"], &copy);
        let failures = oom["failures"].as_array().unwrap();
        assert_eq!(failures.len(), truth.len(), "{name}");
        for (f, t) in failures.iter().zip(&truth) {
            assert_eq!(f["requested_bytes"].as_u64(), Some(1 << 40), "{name}");
            assert_eq!(f["driver_free_bytes"], 12345, "{name}");
            assert_eq!(f["frames"][0]["function"], "step", "{name}");
            // Right after the peak: the tensors alive then.
            assert_eq!(f["tensor_bytes"], t["peak"], "{name}");
            let mut by = std::collections::BTreeMap::<(String, String), u64>::new();
            for g in f["tensor_groups"].as_array().unwrap() {
                let frames = g["frames"].as_array().cloned().unwrap_or_default();
                if let Some(fr) = frames.iter().find(|fr| fr["module"] != "operator") {
                    let key = (
                        fr["function"].as_str().unwrap().to_string(),
                        fr["file"].as_str().unwrap().to_string(),
                    );
                    *by.entry(key).or_default() += g["bytes"].as_u64().unwrap();
                }
            }
            let top = by.iter().max_by_key(|kv| kv.1).unwrap();
            assert_eq!(top.0 .0, t["function"].as_str().unwrap(), "{name}");
            assert_eq!(*top.1, t["function_bytes"].as_u64().unwrap(), "{name}");
        }
        let text =
            String::from_utf8(common::vramtrace(&["oom", copy.to_str().unwrap()]).stdout).unwrap();
        let function = truth[0]["function"].as_str().unwrap();
        assert!(
            text.contains("Its live tensors (allocated layer) asked for"),
            "{text}"
        );
        assert!(text.contains(function), "{name}: {function} in {text}");
    }
}

#[test]
fn a_foreign_pickle_is_refused_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.pkl");
    let ok = Command::new("python3")
        .args([
            "-c",
            "import pickle,sys; pickle.dump([1, 2, 3], open(sys.argv[1], 'wb'))",
        ])
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    for view in ["summary", "peak", "leaks", "oom", "timeline", "flamegraph"] {
        let out = common::vramtrace(&[view, path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{view}");
        assert!(
            stderr.contains("model.pkl") && stderr.contains("not a PyTorch memory snapshot"),
            "{view}: {stderr}"
        );
    }
}

/// An out-of-memory entry with a stack as PyTorch records it (C++ and Python interleaved):
/// `snapshot`, `oom` and `peak` show the operator and the user's own frames, and
/// `--all-frames` every one.
#[test]
fn stacks_show_the_operator_and_the_users_frames() {
    let script = r#"
import pickle, sys
f = lambda name, filename="??": {"name": name, "filename": filename, "line": 0}
py = lambda name, filename, line: {"name": name, "filename": filename, "line": line}
frames = [f("torch::unwind::unwind()"), f("torch::CapturedTraceback::gather(bool, bool, bool)"),
          f("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)", "CUDACachingAllocator.cpp"),
          f("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"),
          f("torch::autograd::THPVariable_mm(_object*, _object*, _object*)", "python_torch_functions.cpp"),
          f("_PyEval_EvalFrameDefault"),
          py("forward", "/env/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125),
          py("_call_impl", "/env/lib/python3.11/site-packages/torch/nn/modules/module.py", 1750),
          py("forward", "/home/me/model.py", 40), f("PyObject_Call"),
          py("<module>", "/home/me/train.py", 88), f("Py_BytesMain"), f("_start")]
seg = {"device": 0, "address": 1 << 32, "total_size": 2 << 20, "stream": 0,
       "segment_type": "large", "frames": [],
       "blocks": [{"address": 1 << 32, "size": 2 << 20, "requested_size": 2 << 20,
                   "state": "active_allocated", "frames": frames}]}
oom = {"action": "oom", "addr": 0, "size": 8 << 20, "stream": 0, "time_us": 1, "frames": frames}
pickle.dump({"segments": [seg], "device_traces": [[oom]]}, open(sys.argv[1], "wb"), protocol=4)
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snap.pickle");
    let ok = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let names = |frames: &Value, key: &str| -> Vec<String> {
        frames
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f[key].as_str().unwrap().to_string())
            .collect()
    };
    let readable = ["aten::mm", "forward", "<module>"];
    let snap = view(&["snapshot", "--json"], &path);
    let frames = &snap["devices"][0]["ooms"][0]["frames"];
    assert_eq!(names(frames, "name"), readable);
    assert_eq!(frames[1]["filename"], "/home/me/model.py");
    let oom = view(&["oom", "--json"], &path);
    assert_eq!(names(&oom["failures"][0]["frames"], "function"), readable);
    let peak = view(&["peak", "--json"], &path);
    assert_eq!(
        names(&peak["devices"][0]["groups"][0]["frames"], "function"),
        readable
    );
    assert_eq!(
        peak["devices"][0]["top_function"]["file"],
        "/home/me/model.py"
    );
    let all = view(&["snapshot", "--json", "--all-frames"], &path);
    assert_eq!(
        all["devices"][0]["ooms"][0]["frames"]
            .as_array()
            .unwrap()
            .len(),
        12
    );
    let all = view(&["oom", "--json", "--all-frames"], &path);
    assert_eq!(all["failures"][0]["frames"].as_array().unwrap().len(), 13);
}

/// `peak --at` on a snapshot: the tensors alive at that moment of its history (time 0 its
/// first entry), as a replay in Python counts them.
#[test]
fn peak_at_a_moment_of_the_history() {
    if common::fixtures().is_none() {
        return;
    }
    let script = r#"
import json, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
trace = snap["device_traces"][0]
alive = {b["address"]: b["requested_size"] for s in snap["segments"] for b in s["blocks"]
         if b["state"] != "inactive"}
for e in reversed(trace):
    if e["action"] == "alloc": del alive[e["addr"]]
    elif e["action"] == "free_completed": alive[e["addr"]] = e["size"]
start = trace[0]["time_us"]
for e in trace:
    if e["time_us"] - start > 1_000_000: break
    if e["action"] == "alloc": alive[e["addr"]] = e["size"]
    elif e["action"] == "free_completed": del alive[e["addr"]]
print(json.dumps([{"bytes": sum(alive.values()), "tensors": len(alive)}]))
"#;
    let path = fixtures().join("EoR_NN_snapshot.pickle");
    let truth = common::python_list(script, &[&path]);
    let peak = view(&["peak", "--json", "--at", "1s"], &path);
    let d = &peak["devices"][0];
    assert_eq!(d["layer"], "allocated");
    assert_eq!(d["live_bytes"], truth[0]["bytes"]);
    assert_eq!(d["live_blocks"], truth[0]["tensors"]);
}

/// The first process's figures for `device` in `summary --json`.
fn process_device<'a>(summary: &'a Value, device: &Value) -> &'a Value {
    summary["processes"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| &s["device"] == device)
        .unwrap()
}

/// A segment of 20 MiB whose one tensor was freed before an `oom` entry.
const FREED_BEFORE_THE_FAILURE: &str = r#"
import pickle, sys
MiB = 1 << 20
at = 0x7f0000000000
frames = [{"filename": "train.py", "line": 7, "name": "step"}]
block = {"address": at, "size": 20 * MiB, "requested_size": 0, "state": "inactive", "frames": []}
segment = {"device": 0, "address": at, "total_size": 20 * MiB, "allocated_size": 0,
           "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
           "frames": frames, "blocks": [block]}
def entry(action, addr, size, t, **more):
    return dict(action=action, addr=addr, size=size, stream=0, time_us=t, frames=frames, **more)
history = [entry("segment_alloc", at, 20 * MiB, 1), entry("alloc", at, 4 * MiB, 2),
           entry("free_requested", at, 4 * MiB, 3), entry("free_completed", at, 4 * MiB, 4),
           entry("oom", 0, 1 << 30, 5, device_free=12345)]
pickle.dump({"segments": [segment], "device_traces": [history]}, open(sys.argv[1], "wb"), protocol=4)
"#;

/// A failure with no tensor live, where the snapshot knows its tensors, is answered at the
/// allocated layer by `oom` and the report alike: none live (its 20 MiB are cache), not
/// the device's blocks in their place.
#[test]
fn a_failure_with_no_tensor_live_is_shown_at_the_allocated_layer_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("freed.pickle");
    let made = Command::new("python3")
        .arg("-c")
        .arg(FREED_BEFORE_THE_FAILURE)
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let oom = view(&["oom", "--json"], &path);
    let f = &oom["failures"][0];
    assert_eq!(f["layer"], "allocated", "{f}");
    assert_eq!(f["tensor_bytes"], 0, "{f}");
    assert_eq!(f["live_bytes"], 20 << 20, "{f}");
    let text = report(&path);
    let failure = text
        .split("id=\"vt-flame-failure-0\"")
        .nth(1)
        .expect("a failure graph");
    assert!(
        failure.starts_with(" title=\"flamegraph: tensors live: 0 B\""),
        "{:.200}",
        failure
    );
}
