//! The PyTorch hook's `torch-HOST-PID.json` lists every out-of-memory error with the free
//! bytes and total its observer saw at it. Those figures join the traced failures, and
//! `summary`, `oom` and the memory-viz export give the same driver figure for each
//! failure, by one rule: vramtrace's question right after it, else PyTorch's, else the
//! program's last answer before it.
//!
//! GIVEN pid 42 on h1, which asks the driver once at its start (70 GiB free of 80), then
//! fails 20 GiB twice (the caching allocator's retry after freeing its cache: one error),
//! allocates 1 GiB, and fails 30 GiB, which vramtrace's probe answers (3 GiB free); its
//! hook's json lists both errors (5 GiB and 4 GiB free of 80 GiB). NVML sampled the
//! process at 9.3 GiB just before the last failure.

mod common;
use common::*;
use serde_json::{json, Value};

const UNIX0: u64 = 1_700_000_000 * S;

fn probe(t: u64, free: u64, total: u64) -> String {
    json!({"t": t, "tid": 7, "dev": 0, "api": "vramtrace_probe_meminfo", "res": 0, "free": free, "total": total})
        .to_string()
}

fn run_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_trace(
        dir.path(),
        "vramtrace-h1-42.jsonl",
        &[
            header(42, "h1", S, UNIX0, None),
            meminfo(10 * MS, 0, 70 * GIB, 80 * GIB),
            alloc(20 * MS, 0, "cudaMalloc", 0x1000_0000, 8 * GIB),
            failed(100 * MS, 0, "cudaMalloc", 20 * GIB),
            failed(101 * MS, 0, "cudaMalloc", 20 * GIB),
            alloc(150 * MS, 0, "cudaMalloc", 0x9_0000_0000, GIB),
            json!({"t": 180 * MS, "tid": 7, "dev": 0, "api": "nvml_sample", "res": 0, "size": 9 * GIB + 300 * MIB}).to_string(),
            failed(200 * MS, 0, "cudaMalloc", 30 * GIB),
            probe(200 * MS, 3 * GIB, 80 * GIB),
            end(500 * MS, 8),
        ],
    );
    let info = json!({"pid": 42, "ooms": [
        {"device": 0, "allocation_bytes": 20 * GIB, "device_limit_bytes": 80 * GIB,
         "device_free_bytes": 5 * GIB, "snapshot": null},
        {"device": 0, "allocation_bytes": 30 * GIB, "device_limit_bytes": 80 * GIB,
         "device_free_bytes": 4 * GIB, "snapshot": null}]});
    std::fs::write(dir.path().join("torch-h1-42.json"), info.to_string()).unwrap();
    dir
}

/// Where each failure's driver figure comes from, in `summary`.
fn sources(summary: &Value) -> Vec<Value> {
    summary["processes"][0]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["driver_figure"].clone())
        .collect()
}

/// Each failure's driver figure: (free, total) in the order of the failures.
fn figures(failures: &Value) -> Vec<(Value, Value)> {
    failures
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["driver_free_bytes"].clone(),
                f["driver_total_bytes"].clone(),
            )
        })
        .collect()
}

#[test]
fn summary_oom_and_export_give_one_driver_figure_per_failure() {
    let dir = run_dir();
    let path = dir.path().to_str().unwrap();
    let expected = vec![
        // The first try of the first error: the program's answer from its start.
        (json!(70 * GIB), json!(80 * GIB)),
        // Its retry, after which PyTorch's observer ran: the hook's figure.
        (json!(5 * GIB), json!(80 * GIB)),
        // vramtrace asked right after the failure: its own question wins.
        (json!(3 * GIB), json!(80 * GIB)),
    ];
    let (summary, code, stderr) = json_view(&["summary", "--json", path]);
    assert_eq!(code, Some(0), "{stderr}");
    let from_summary = figures(&summary["processes"][0]["failures"]);
    assert_eq!(from_summary, expected, "summary");
    assert_eq!(sources(&summary), ["last_answer", "pytorch", "probe"]);
    let (oom, _, _) = json_view(&["oom", "--json", path]);
    assert_eq!(figures(&oom["failures"]), expected, "oom");
    // The device layer where known: NVML's sample at 180 ms is before the last failure only.
    let device: Vec<&Value> = oom["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["device_bytes"])
        .collect();
    assert_eq!(
        device,
        [&Value::Null, &Value::Null, &json!(9 * GIB + 300 * MIB)]
    );
    let text = String::from_utf8(vramtrace(&["oom", path]).stdout).unwrap();
    let bytes = vramtrace_analyzer::units::bytes;
    let said = format!(
        "PyTorch's out-of-memory observer saw {} free of {}",
        bytes(5 * GIB),
        bytes(80 * GIB)
    );
    assert!(text.contains(&said), "{said} in {text}");

    // The memory-viz export's `oom` entries ("CUDA has N free" in the viewer).
    let out = tempfile::tempdir().unwrap();
    let pickle = out.path().join("run.pickle");
    vramtrace_ok(&[
        "export",
        "--format",
        "memory-viz",
        "-o",
        pickle.to_str().unwrap(),
        path,
    ]);
    let read = r#"
import json, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
print(json.dumps([e["device_free"] for t in snap["device_traces"] for e in t if e["action"] == "oom"]))
"#;
    let free: Vec<Value> = python_list(read, &[&pickle]);
    let want: Vec<Value> = expected.iter().map(|e| e.0.clone()).collect();
    assert_eq!(free, want, "memory-viz");
}

#[test]
fn an_error_the_trace_does_not_hold_is_named() {
    let dir = run_dir();
    let info = json!({"pid": 42, "ooms": [
        {"device": 0, "allocation_bytes": 7 * GIB, "device_limit_bytes": 80 * GIB,
         "device_free_bytes": 5 * GIB, "snapshot": null}]});
    std::fs::write(dir.path().join("torch-h1-42.json"), info.to_string()).unwrap();
    let (summary, _, stderr) = json_view(&["summary", "--json", dir.path().to_str().unwrap()]);
    assert!(
        stderr.contains("1 of its 1 out-of-memory errors match no failed allocation"),
        "{stderr}"
    );
    // Nothing was given to a failure it is not.
    assert_eq!(sources(&summary), ["last_answer", "last_answer", "probe"]);
}
