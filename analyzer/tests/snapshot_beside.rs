//! A run directory holding a process's trace and the snapshot its PyTorch hook wrote: the
//! snapshot's tensors join that process's allocated layer on the trace's clock, so `peak`
//! names them by Python call site and `oom` lists those alive at the traced failure, while
//! the reserved layer stays the trace's own.
//!
//! GIVEN pid 42 on h1 whose trace allocates a 20 MiB segment at 50 ms and fails a 64 MiB
//! `cudaMalloc` at 300 ms, and its hook's snapshot, whose history (wall clock) takes that
//! segment at 50 ms and hands out tensors inside it from three lines of train.py, one freed
//! and its room reused. The expected figures come from a replay of the pickle in Python.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const UNIX0: u64 = 1_700_000_000 * S;
const SEGMENT: u64 = 0x7f00_0000_0000;

/// Writes the snapshot (argv[1]) for a trace starting at wall clock argv[2] (us), then
/// prints, from a replay of what it wrote: the tensor peak, the function of train.py
/// holding the most at it, and the tensors by function at argv[3] us after the start.
const WRITE_AND_REPLAY: &str = r#"
import json, pickle, sys
path, unix0, probe = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MIB, X = 1 << 20, 0x7f0000000000
def frames(name, line):
    return [{"filename": "/usr/lib/python3/site-packages/torch/nn/functional.py", "line": 9, "name": "linear"},
            {"filename": "/home/me/train.py", "line": line, "name": name}]
def at(ms):
    return unix0 + ms * 1000
trace = [{"action": "segment_alloc", "addr": X, "size": 20 * MIB, "stream": 0, "time_us": at(50), "frames": []}]
def alloc(ms, addr, size, name, line):
    trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": at(ms), "frames": frames(name, line)})
def free(ms, addr, size):
    for a in ("free_requested", "free_completed"):
        trace.append({"action": a, "addr": addr, "size": size, "stream": 0, "time_us": at(ms), "frames": []})
alloc(60, X, 4 * MIB, "build_model", 10)
alloc(70, X + 4 * MIB, 6 * MIB, "forward", 20)
alloc(80, X + 10 * MIB, 2 * MIB, "forward", 21)
free(100, X + 4 * MIB, 6 * MIB)
alloc(110, X + 4 * MIB, 3 * MIB, "backward", 30)
blocks = [(X, 4 * MIB, "active_allocated", "build_model", 10),
          (X + 4 * MIB, 3 * MIB, "active_allocated", "backward", 30),
          (X + 7 * MIB, 3 * MIB, "inactive", None, 0),
          (X + 10 * MIB, 2 * MIB, "active_allocated", "forward", 21),
          (X + 12 * MIB, 8 * MIB, "inactive", None, 0)]
segment = {"device": 0, "address": X, "total_size": 20 * MIB, "stream": 0, "segment_type": "large",
           "frames": [], "blocks": [{"address": a, "size": s, "requested_size": s if n else 0, "state": st,
                                     "frames": frames(n, l) if n else []} for a, s, st, n, l in blocks]}
pickle.dump({"segments": [segment], "device_traces": [trace]}, open(path, "wb"), protocol=4)

snap = pickle.load(open(path, "rb"))
alive, peak, by_at_peak, by_at_probe = {}, 0, {}, None
def by_function():
    by = {}
    for size, fr in alive.values():
        name = [f["name"] for f in fr if f["filename"] == "/home/me/train.py"][0]
        by[name] = by.get(name, 0) + size
    return by
for e in snap["device_traces"][0]:
    if by_at_probe is None and e["time_us"] > unix0 + probe:
        by_at_probe = by_function()
    {"alloc": lambda: alive.update({e["addr"]: (e["size"], e["frames"])}),
     "free_completed": lambda: alive.pop(e["addr"])}.get(e["action"], lambda: None)()
    live = sum(size for size, _ in alive.values())
    if live > peak:
        peak, by_at_peak = live, by_function()
if by_at_probe is None:
    by_at_probe = by_function()
top = max(by_at_peak.items(), key=lambda kv: kv[1])
print(json.dumps([{"peak": peak, "function": top[0], "function_bytes": top[1],
                   "at_failure": by_at_probe}]))
"#;

struct Run {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    truth: Value,
}

fn run_dir() -> Run {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    write_trace(
        &d,
        "vramtrace-h1-42.jsonl",
        &[
            header(42, "h1", S, UNIX0, None),
            alloc(50 * MS, 0, "cudaMalloc", SEGMENT, 20 * MIB),
            failed(300 * MS, 0, "cudaMalloc", 64 * MIB),
            end(500 * MS, 2),
        ],
    );
    let pickle = d.join("torch-snapshot-h1-42.pickle");
    let unix0_us = (UNIX0 / 1000).to_string();
    let failure_us = (300 * MS / 1000).to_string();
    let truth = python_list(
        WRITE_AND_REPLAY,
        &[&pickle, Path::new(&unix0_us), Path::new(&failure_us)],
    )
    .remove(0);
    Run {
        _dir: dir,
        path: d,
        truth,
    }
}

fn view(args: &[&str], path: &Path) -> Value {
    let out = vramtrace_ok(&[args, &[path.to_str().unwrap()]].concat());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn peak_on_the_run_names_the_tensors_by_python_call_site() {
    let run = run_dir();
    let peak = view(&["peak", "--json"], &run.path);
    let d = &peak["devices"][0];
    assert_eq!(d["layer"], "allocated", "{peak}");
    assert_eq!(d["live_bytes"], run.truth["peak"], "{peak}");
    let top = &d["top_function"];
    assert_eq!(top["function"], run.truth["function"], "{top}");
    assert_eq!(top["file"], "/home/me/train.py", "{top}");
    assert_eq!(top["bytes"], run.truth["function_bytes"], "{top}");
    // The tensors' peak is at 80 ms on the trace's clock (the snapshot's wall clock less
    // the trace's start), inside the process's lifetime.
    assert_eq!(d["time_ns"].as_u64(), Some(80 * MS), "{d}");
    // The reserved layer is still the trace's own: its one segment.
    let reserved = view(&["peak", "--json", "--layer", "reserved"], &run.path);
    assert_eq!(reserved["devices"][0]["layer"], "reserved");
    assert_eq!(
        reserved["devices"][0]["live_bytes"].as_u64(),
        Some(20 * MIB)
    );
    // summary: the process, not a second one, has the allocated layer.
    let summary = view(&["summary", "--json"], &run.path);
    let processes = summary["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{summary}");
    let dev = &processes[0]["devices"][0];
    assert_eq!(dev["peak_requested_bytes"], run.truth["peak"], "{dev}");
    assert_eq!(dev["peak_reserved_bytes"].as_u64(), Some(20 * MIB), "{dev}");
    // Block sizes, by the tests' own replay of the pickle.
    let blocks = python_list(
        BLOCK_SIZES,
        &[&run.path.join("torch-snapshot-h1-42.pickle")],
    );
    assert_eq!(blocks[0]["wrong"], 0, "{blocks:?}");
    assert_eq!(
        dev["peak_allocated_bytes"], blocks[0]["peak_allocated"],
        "{dev}"
    );
}

#[test]
fn oom_lists_the_tensors_alive_at_the_traced_failure() {
    let run = run_dir();
    let oom = view(&["oom", "--json"], &run.path);
    let failures = oom["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{oom}");
    let f = &failures[0];
    assert_eq!(f["requested_bytes"].as_u64(), Some(64 * MIB));
    let mut by = serde_json::Map::new();
    for g in f["tensor_groups"].as_array().unwrap() {
        let frame = g["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|fr| fr["file"] == "/home/me/train.py")
            .unwrap_or_else(|| panic!("{g}"));
        let name = frame["function"].as_str().unwrap().to_string();
        let sum = by.get(&name).and_then(Value::as_u64).unwrap_or(0) + g["bytes"].as_u64().unwrap();
        by.insert(name, sum.into());
    }
    assert_eq!(Value::Object(by), run.truth["at_failure"], "{f}");
}

/// A pickle at `path` whose history takes a segment and allocates one tensor of `size` in
/// it at wall clock `at_ns`, never freed.
fn one_tensor(path: &Path, addr: u64, size: u64, at_ns: u64) {
    let script = r#"
import pickle, sys
path, addr, size, t_us = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) // 1000
frames = [{"filename": "/home/me/job.py", "line": 1, "name": "main"}]
trace = [{"action": "segment_alloc", "addr": addr, "size": size, "stream": 0, "time_us": t_us, "frames": []},
         {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t_us, "frames": frames}]
segment = {"device": 0, "address": addr, "total_size": size, "stream": 0, "segment_type": "large",
           "frames": [], "blocks": [{"address": addr, "size": size, "requested_size": size,
                                     "state": "active_allocated", "frames": frames}]}
pickle.dump({"segments": [segment], "device_traces": [trace]}, open(path, "wb"), protocol=4)
print("[]")
"#;
    let args = [addr.to_string(), size.to_string(), at_ns.to_string()];
    let args: Vec<&Path> = std::iter::once(path)
        .chain(args.iter().map(Path::new))
        .collect();
    python_list(script, &args);
}

/// Two jobs one after the other on one GPU, each leaving its tensors alive at its exit (as
/// PyTorch does): the run's allocated layer gives the first job's tensors back when it
/// ends, so the GPU's tensor peak is the larger job's, never the two summed.
#[test]
fn an_ended_process_s_tensors_leave_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (pid, start, addr, size) in [(1u32, 0, SEGMENT, 8 * MIB), (2, 2 * S, SEGMENT, 6 * MIB)] {
        write_trace(
            d,
            &format!("vramtrace-h1-{pid}.jsonl"),
            &[
                header(pid, "h1", S + start, UNIX0 + start, None),
                alloc(10 * MS, 0, "cudaMalloc", addr, size),
                end(S, 1),
            ],
        );
        one_tensor(
            &d.join(format!("torch-snapshot-h1-{pid}.pickle")),
            addr,
            size,
            UNIX0 + start + 10 * MS,
        );
    }
    let summary = view(&["summary", "--json"], d);
    let gpu = &summary["devices"][0];
    assert_eq!(gpu["peak_requested_bytes"].as_u64(), Some(8 * MIB), "{gpu}");
    assert_eq!(gpu["peak_reserved_bytes"].as_u64(), Some(8 * MIB), "{gpu}");
    let processes = summary["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2);
    for p in processes {
        // Each process keeps its own: what it never freed.
        let want = if p["pid"] == 1 { 8 * MIB } else { 6 * MIB };
        assert_eq!(
            p["devices"][0]["peak_requested_bytes"].as_u64(),
            Some(want),
            "{p}"
        );
    }
}

/// The segments both saw check the two clocks: when the trace took the segment 100 ms
/// after the history says it did, a note says how far apart they are; in step, none.
#[test]
fn clocks_apart_are_said() {
    let run = run_dir();
    let notes = |out: std::process::Output| String::from_utf8(out.stderr).unwrap();
    let path = run.path.to_str().unwrap();
    let said = notes(vramtrace_ok(&["summary", path]));
    assert!(!said.contains("its clock is"), "{said}");
    write_trace(
        &run.path,
        "vramtrace-h1-42.jsonl",
        &[
            header(42, "h1", S, UNIX0, None),
            alloc(150 * MS, 0, "cudaMalloc", SEGMENT, 20 * MIB),
            end(500 * MS, 1),
        ],
    );
    let said = notes(vramtrace_ok(&["summary", path]));
    assert!(
        said.contains("by 1 segment it shares with its process's trace, its clock is 100.0 ms behind the trace's"),
        "{said}"
    );
}

/// A pack of the run directory reads as the directory: the hook snapshot still joins.
#[test]
fn a_pack_of_the_run_keeps_the_tensors() {
    let run = run_dir();
    let out = tempfile::tempdir().unwrap();
    let pack = out.path().join("run.vtpack");
    vramtrace_ok(&[
        "pack",
        "-o",
        pack.to_str().unwrap(),
        run.path.to_str().unwrap(),
    ]);
    let peak = view(&["peak", "--json"], &pack);
    let d = &peak["devices"][0];
    assert_eq!(d["layer"], "allocated", "{peak}");
    assert_eq!(d["live_bytes"], run.truth["peak"], "{peak}");
    assert_eq!(d["top_function"]["function"], run.truth["function"], "{d}");
}
