//! What the tensors were for (parameters, gradients, optimizer state, activations), as
//! `summary` and `oom` infer it from the frames of a snapshot: against a training step
//! whose tensors' sizes the test chose, and against an independent reading of the real
//! snapshots' frames by Python's own `pickle`.

mod common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Bytes and tensors per category, as the JSON has them.
fn split(c: &Value) -> BTreeMap<String, (u64, u64)> {
    assert_eq!(c["known_by"], "inferred", "{c}");
    common::categories(c)
}

/// A training step's snapshot, written by Python's pickle: a model's three parameters
/// (moved to the GPU by `.to()`), their gradients (the autograd engine), Adam's two
/// moments of each (inside `step`), two activations of its forward, a temporary of the
/// user's own code, a tensor alive before the history (no frames), then an
/// out-of-memory entry. Every tensor has a segment of its own, so no size is rounded.
const TRAINING_STEP: &str = r#"
torch = "/usr/lib/python3/site-packages/torch"
user = [{"filename": "/home/me/train.py", "line": 40, "name": "main"}]
to = [{"filename": torch + "/nn/modules/module.py", "line": 1, "name": "_apply"},
      {"filename": torch + "/nn/modules/module.py", "line": 2, "name": "to"}] + user
engine = [{"filename": "", "line": 0, "name": "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"}]
adam = [{"filename": torch + "/optim/adam.py", "line": 3, "name": "_init_group"},
        {"filename": torch + "/optim/optimizer.py", "line": 4, "name": "wrapper"}] + user
forward = [{"filename": "/home/me/model.py", "line": 7, "name": "forward"},
           {"filename": torch + "/nn/modules/module.py", "line": 5, "name": "_call_impl"}] + user
params = [4 * M, 2 * M, 2 * M]
tensors = [("before", 2 * M, [])]
tensors += [("parameters", s, to) for s in params]
tensors += [("activations", s, forward) for s in [4 * M, 2 * M]]
tensors += [("other", 2 * M, user)]
tensors += [("gradients", s, engine) for s in params]
tensors += [("optimizer_state", s, adam) for s in params for _ in range(2)]
segments, trace = one_segment_each([(size, frames) for _, size, frames in tensors])
# The first was alive before the history began: its entries are not in it.
trace = trace[2:]
trace.append({"action": "oom", "addr": 0, "size": 80 * M, "stream": 0,
              "time_us": trace[-1]["time_us"] + 1, "device_free": 10 * M, "frames": forward})
pickle.dump({"segments": segments, "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#;

#[test]
fn a_training_steps_tensors_are_split_by_what_they_were_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step.pickle");
    common::write_snapshot(TRAINING_STEP, &path);
    let m = 1u64 << 20;
    let want: BTreeMap<String, (u64, u64)> = [
        ("parameters", (8 * m, 3)),
        ("gradients", (8 * m, 3)),
        ("optimizer_state", (16 * m, 6)),
        ("activations", (6 * m, 2)),
        ("other", (2 * m, 1)),
        ("unknown", (2 * m, 1)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let file = path.to_str().unwrap();
    let (summary, _, stderr) = common::json_view(&["summary", "--json", file]);
    let device = &summary["processes"][0]["devices"][0];
    assert_eq!(split(&device["tensor_categories_at_end"]), want, "{stderr}");
    assert_eq!(split(&device["tensor_categories_at_peak"]), want);
    let failure = &summary["processes"][0]["failures"][0];
    assert_eq!(split(&failure["tensor_categories"]), want);
    let (oom, _, _) = common::json_view(&["oom", "--json", file]);
    assert_eq!(split(&oom["failures"][0]["tensor_categories"]), want);
    let (peak, _, _) = common::json_view(&["peak", "--json", file]);
    assert_eq!(split(&peak["devices"][0]["categories"]), want);
    let text = common::vramtrace_ok(&["peak", "--by", "category", file]).stdout;
    let text = String::from_utf8(text).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.contains("what they were for (inferred from their frames)"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["16.0", "MiB", "6", "optimizer", "state"],
            vec!["8.0", "MiB", "3", "parameters"],
            vec!["8.0", "MiB", "3", "gradients"],
            vec!["6.0", "MiB", "2", "activations"],
            vec!["2.0", "MiB", "1", "other", "tensors"],
            vec!["2.0", "MiB", "1", "not", "known"],
        ],
        "{text}"
    );

    // The text says it in a line, largest first, and that it is inferred.
    let text = String::from_utf8(common::vramtrace_ok(&["summary", file]).stdout).unwrap();
    assert!(
        text.contains("(inferred from their frames): optimizer state 16.0 MiB, parameters 8.0 MiB, gradients 8.0 MiB, activations 6.0 MiB, other tensors 2.0 MiB, not known 2.0 MiB"),
        "{text}"
    );
    let text = String::from_utf8(common::vramtrace_ok(&["oom", file]).stdout).unwrap();
    assert!(
        text.contains(
            "by what they were for (inferred from their frames): optimizer state 16.0 MiB"
        ),
        "{text}"
    );
}

/// Per device of each snapshot: the held blocks' (`active_allocated`,
/// `active_pending_free`) bytes and count per category, by the rules of docs/json.md
/// read from the frames by Python.
const READING: &str = r#"
import json, pickle, sys
def backward(f, n):
    return ("torch::autograd::Engine" in n or "torch::autograd::generated::" in n
            or (n == "backward" and ("/torch/autograd/" in f or f.endswith("/torch/_tensor.py")
                                     or "/torch/_functorch/" in f))
            or (n == "grad" and f.endswith("/torch/autograd/__init__.py")))
def rule(f, n):
    if "/torch/optim/" in f and not f.endswith(("/lr_scheduler.py", "/swa_utils.py")):
        return "optimizer_state"
    if (f.endswith(("/torch/nn/parameter.py", "/torch/serialization.py"))
            or "/torch/distributed/fsdp/" in f or "/torch/distributed/_composable/" in f
            or (n == "__init__" and "/torch/nn/" in f) or n == "reset_parameters"
            or (f.endswith("/torch/nn/modules/module.py")
                and n in ("_apply", "to", "cuda", "load_state_dict", "_load_from_state_dict"))):
        return "parameters"
    if n == "forward" or (f.endswith("/torch/nn/modules/module.py")
                          and n in ("_call_impl", "_wrapped_call_impl")):
        return "activations"
    return None
def category(frames):
    # The backward pass's tensors are gradients; else the innermost frame that meets a
    # rule decides.
    if not frames:
        return "unknown"
    read = [(f["filename"][:4096], f["name"][:4096]) for f in frames]
    if any(backward(f, n) for f, n in read):
        return "gradients"
    for f, n in read:
        c = rule(f, n)
        if c:
            return c
    return "other"
out = []
for path in sys.argv[1:]:
    s = pickle.load(open(path, "rb"))
    segments = s["segments"] if isinstance(s, dict) else s
    devices = {}
    for g in segments:
        d = devices.setdefault(g["device"], {})
        for b in g["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                # A block's frames, or (PyTorch 2.0) its history's last use's.
                if "frames" in b:
                    frames = b["frames"]
                elif b.get("history"):
                    frames = b["history"][-1].get("frames") or []
                else:
                    frames = []
                c = d.setdefault(category(frames), [0, 0])
                c[0] += b["size"]
                c[1] += 1
    out.append({str(k): v for k, v in devices.items()})
print(json.dumps(out))
"#;

#[test]
fn real_snapshots_categories_are_their_frames_read_by_python() {
    let Some(files) = vramtrace_tests::fixtures::snapshots() else {
        return;
    };
    assert!(files.len() >= 11, "{files:?}");
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let readings = common::python_list(READING, &paths);
    let mut known = 0;
    for (path, reading) in files.iter().zip(&readings) {
        let what = path.file_name().unwrap().to_string_lossy();
        let (summary, _, _) = common::json_view(&["summary", "--json", path.to_str().unwrap()]);
        let (peak_view, _, _) = common::json_view(&["peak", "--json", path.to_str().unwrap()]);
        for d in summary["processes"][0]["devices"].as_array().unwrap() {
            let Some(end) = d.get("tensor_categories_at_end").filter(|c| !c.is_null()) else {
                continue;
            };
            let got = split(end);
            let mut want: BTreeMap<String, (u64, u64)> =
                got.keys().map(|k| (k.clone(), (0, 0))).collect();
            if let Some(r) = reading[d["device"].to_string()].as_object() {
                for (k, v) in r {
                    want.insert(k.clone(), (v[0].as_u64().unwrap(), v[1].as_u64().unwrap()));
                }
            }
            assert_eq!(got, want, "{what} device {}: at the end", d["device"]);
            let sum = |c: &Value| split(c).values().map(|v| v.0).sum::<u64>();
            assert_eq!(
                Some(sum(end)),
                d["allocated_bytes_at_end"].as_u64(),
                "{what}"
            );
            let peak = &d["tensor_categories_at_peak"];
            assert_eq!(
                Some(sum(peak)),
                d["peak_requested_bytes"].as_u64(),
                "{what}: at the peak"
            );
            // The whole split at the reserved peak: its parts sum to that peak, and its
            // tensors are no more than at their own peak.
            let whole = &d["split_at_peak"];
            let parts: Vec<(&str, u64)> = whole["parts"]
                .as_array()
                .unwrap_or_else(|| panic!("{what}: {whole}"))
                .iter()
                .map(|p| (p["part"].as_str().unwrap(), p["bytes"].as_u64().unwrap()))
                .collect();
            let all: u64 = parts.iter().map(|p| p.1).sum();
            assert_eq!(
                Some(all),
                d["peak_reserved_bytes"].as_u64(),
                "{what}: {whole}"
            );
            let tensors: u64 = parts
                .iter()
                .filter(|p| p.0 != "allocator_cache")
                .map(|p| p.1)
                .sum();
            assert!(
                tensors <= d["peak_requested_bytes"].as_u64().unwrap(),
                "{what}: {whole}"
            );
            // `peak` (one process: the same peak) says the same.
            let shown = peak_view["devices"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["gpu"] == d["gpu"])
                .unwrap_or_else(|| panic!("{what}: no GPU {} in peak", d["gpu"]));
            assert_eq!(split(&shown["categories"]), split(peak), "{what}: peak");
            known += got
                .iter()
                .filter(|(k, v)| *k != "unknown" && v.0 > 0)
                .count();
        }
    }
    assert!(known >= 10, "categories other than unknown: {known}");
}

/// Two tensors from one line of the program and one operator, one inside an optimizer's
/// step and one inside a module's `.to()`: torch's frames, which the views leave out, tell
/// them apart.
const ALIKE: &str = r#"
torch = "/usr/lib/python3/site-packages/torch"
op = {"filename": "", "line": 0, "name": "at::_ops::zeros_like::call(at::Tensor const&)"}
user = {"filename": "/home/me/train.py", "line": 12, "name": "<module>"}
optim = [op, {"filename": torch + "/optim/adam.py", "line": 3, "name": "_init_group"}, user]
to = [op, {"filename": torch + "/nn/modules/module.py", "line": 1, "name": "_apply"}, user]
segments, trace = one_segment_each([(8 * M, optim), (4 * M, to)])
pickle.dump({"segments": segments, "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#;

#[test]
fn tensors_that_read_alike_are_one_group_of_two_categories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alike.pickle");
    common::write_snapshot(ALIKE, &path);
    let file = path.to_str().unwrap();
    let m = 1u64 << 20;
    let (summary, _, _) = common::json_view(&["summary", "--json", file]);
    let tensors = summary["devices"][0]["tensors_at_peak"].as_array().unwrap();
    let groups: Vec<(u64, u64)> = tensors
        .iter()
        .map(|g| (g["bytes"].as_u64().unwrap(), g["blocks"].as_u64().unwrap()))
        .collect();
    assert_eq!(groups, [(12 * m, 2)], "{tensors:?}");
    let (peak, _, _) = common::json_view(&["peak", "--json", file]);
    assert_eq!(peak["devices"][0]["groups"].as_array().unwrap().len(), 1);
    let c = split(&peak["devices"][0]["categories"]);
    assert_eq!(c["optimizer_state"], (8 * m, 1));
    assert_eq!(c["parameters"], (4 * m, 1));
}

/// 2,000 C++ frames (no operator, no Python frame) sharing one name of 256 KiB: a file of
/// a few hundred KB that named each frame whole would take gigabytes.
const LONG_NAMES: &str = r#"
import pickle, sys
M = 1 << 20
name = "torch::autograd::generated::" + "x" * (256 << 10)
frames = [{"filename": "", "line": i, "name": name} for i in range(2000)]
block = {"address": 1 << 32, "size": 2 * M, "requested_size": 2 * M,
         "state": "active_allocated", "frames": frames}
segment = {"device": 0, "address": 1 << 32, "total_size": 2 * M, "allocated_size": 2 * M,
           "active_size": 2 * M, "requested_size": 2 * M, "stream": 0,
           "segment_type": "large", "blocks": [block]}
trace = [{"action": "segment_alloc", "addr": 1 << 32, "size": 2 * M, "stream": 0,
          "time_us": 1, "frames": frames},
         {"action": "alloc", "addr": 1 << 32, "size": 2 * M, "stream": 0, "time_us": 2,
          "frames": frames}]
pickle.dump({"segments": [segment], "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#;

#[test]
fn frames_with_names_of_a_quarter_mebibyte_stay_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.pickle");
    common::python3(&["-c", LONG_NAMES, path.to_str().unwrap()]);
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20);
    // Under 512 MiB of address space (naming each frame whole took 1.2 GB).
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 524288; exec timeout 60 \"$0\" summary --json \"$1\"")
        .arg(env!("CARGO_BIN_EXE_vramtrace"))
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = split(&summary["processes"][0]["devices"][0]["tensor_categories_at_end"]);
    assert_eq!(c["gradients"], (2 << 20, 1));
}

#[test]
fn diff_compares_what_the_tensors_were_for() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.pickle"), dir.path().join("b.pickle"));
    common::write_snapshot(TRAINING_STEP, &a);
    common::write_snapshot(ALIKE, &b);
    let m = 1i128 << 20;
    // (category, A's bytes, B's bytes), from the two snapshots as the test wrote them.
    let want = [
        ("parameters", 8 * m, 4 * m),
        ("gradients", 8 * m, 0),
        ("optimizer_state", 16 * m, 8 * m),
        ("activations", 6 * m, 0),
        ("other", 2 * m, 0),
        ("unknown", 2 * m, 0),
    ];
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let (diff, _, _) = common::json_view(&["diff", "--json", a, b]);
    let got: Vec<(String, i128, i128, i128)> = diff["devices"][0]["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let n = |k: &str| c[k].as_i64().unwrap() as i128;
            let name = c["category"].as_str().unwrap().to_string();
            (name, n("a_bytes"), n("b_bytes"), n("difference_bytes"))
        })
        .collect();
    let want: Vec<(String, i128, i128, i128)> = want
        .iter()
        .map(|&(c, x, y)| (c.to_string(), x, y, y - x))
        .collect();
    assert_eq!(got, want);
    let text = String::from_utf8(common::vramtrace_ok(&["diff", a, b]).stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("optimizer state"))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells[2..],
        ["16.0", "MiB", "8.0", "MiB", "-8.0", "MiB"],
        "{text}"
    );
}
