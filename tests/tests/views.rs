//! The views on real runs of the simulated stack: the demo's out-of-memory post-mortem
//! against the workload's own ground truth, and XLA's preallocation named as such.

use serde_json::Value;
use vramtrace_tests::harness::run_sim;

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// The demo's sizes, recomputed from its source (tests/workloads/demo.c): everything
/// scales with the card's total memory.
fn scaled(total: u64, bytes_on_80gib: f64) -> u64 {
    let scale = total as f64 / (80.0 * GIB);
    let b = (bytes_on_80gib * scale) as u64;
    (b + 511) & !511
}

#[test]
fn demo_oom_post_mortem_matches_the_workload_truth() {
    let run = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let truth = run.truth("demo");
    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    let failures = oom["failures"].as_array().unwrap();
    let failed: u64 = truth["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["failed"].as_u64().unwrap())
        .sum();
    assert_eq!(failures.len() as u64, failed);
    let f = &failures[0];

    // Live bytes at the failure: the demo exits right after it without freeing, so
    // its own count of what was live at the end is what was live when the call failed.
    let live = truth["live_bytes_at_end"]["0"].as_u64().unwrap();
    assert_eq!(f["live_bytes"].as_u64(), Some(live));
    assert_eq!(
        f["peak_before_bytes"].as_u64(),
        truth["peak_live_bytes"]["0"].as_u64()
    );

    // The request: the truth has no field for it, so recompute it from the demo's
    // formula. Live = 4 x model state + k activations of the failing step (k < 6), or
    // all 6 and the request is the workspace (half an activation).
    let total = truth["meminfo"][0]["total"].as_u64().unwrap();
    let state = scaled(total, 4.0 * GIB);
    let per_sample = scaled(total, 48.0 * MIB);
    let steps_done = run
        .stderr()
        .lines()
        .filter(|l| l.starts_with("step "))
        .count() as u64;
    let act = per_sample * 8 * (steps_done + 1);
    let k = (live - 4 * state) / act;
    assert_eq!(
        (live - 4 * state) % act,
        0,
        "live is model state plus whole activations"
    );
    let requested = if k < 6 { act } else { act / 2 };
    assert_eq!(f["requested_bytes"].as_u64(), Some(requested));
    // The workload's message agrees to two decimals.
    let tried = format!("Tried to allocate {:.2} GiB", requested as f64 / GIB);
    assert!(run.stderr().contains(&tried), "{tried}: {}", run.stderr());

    // What the driver said at the failure: vramtrace asks right after it, and the demo's
    // own cuMemGetInfo in its out-of-memory handler (the truth's second answer) gets the
    // same, nothing having changed between. `summary` gives the same figure. The context
    // (VRAMTRACE_SIM_CONTEXT_BYTES) is not traced: all the driver counts beyond the live
    // bytes, as it was at the start (the truth's first answer).
    let at_failure = &truth["meminfo"][1]["free"];
    assert_eq!(&f["driver_free_bytes"], at_failure);
    assert_eq!(f["driver_total_bytes"].as_u64(), Some(total));
    let summary = run.summary();
    assert_eq!(
        &summary["processes"][0]["failures"][0]["driver_free_bytes"],
        at_failure
    );
    // And the memory-viz export's oom entry, read with Python's own pickle.
    let exported = run.dir.path().join("demo.pickle");
    run.view(&[
        "export",
        "--format",
        "memory-viz",
        "-o",
        exported.to_str().unwrap(),
    ]);
    let py = std::process::Command::new(vramtrace_tests::harness::python())
        .args([
            "-c",
            "import pickle, sys; s = pickle.load(open(sys.argv[1], 'rb')); \
             print([e['device_free'] for t in s['device_traces'] for e in t if e['action'] == 'oom'])",
        ])
        .arg(&exported)
        .output()
        .unwrap();
    let free_in_export: Value = serde_json::from_slice(&py.stdout).unwrap();
    assert_eq!(free_in_export, serde_json::json!([at_failure]));
    let free0 = truth["meminfo"][0]["free"].as_u64().unwrap();
    assert_eq!(f["untraced_bytes"].as_u64(), Some(total - free0));
    assert_eq!(f["verdict"], "held_by_this_process");
    assert_eq!(f["api"], "cudaMalloc");
    assert_eq!(f["other_processes_bytes"], 0);
    let groups_total: u64 = f["live_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(groups_total, live);
}

/// JAX's start: XLA's library (named like jaxlib's xla_extension.so) takes 75% of the card
/// in one allocation. `summary` and `oom` say it is XLA's pool and how to see inside it;
/// the same 75% taken from the program's own code is no such note.
#[test]
fn xla_preallocation_is_named_in_summary_and_oom() {
    let capacity = ["--sim-capacity", "16GiB"];
    let run = run_sim("jax_prealloc", &["xla"], &capacity, &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("jax-prealloc");
    let printed = run.printed("JAX_PREALLOC ");
    let found = &run.summary()["preallocations"];
    assert_eq!(found.as_array().map(Vec::len), Some(1), "{found}");
    assert_eq!(found[0]["pid"], truth["pid"]);
    assert_eq!(found[0]["device"], 0);
    assert_eq!(found[0]["bytes"], printed["bytes"]);
    assert_eq!(found[0]["total_bytes"], printed["total"]);
    assert_eq!(found[0]["evidence"], "xla-frames");
    for view in ["summary", "oom"] {
        let text = run.view(&[view]);
        for setting in [
            "XLA_PYTHON_CLIENT_PREALLOCATE=false",
            "XLA_PYTHON_CLIENT_ALLOCATOR=platform",
        ] {
            assert!(text.contains(setting), "{view} lacks {setting}:\n{text}");
        }
        assert!(
            text.contains("12.0 GiB (75% of the card's 16.0 GiB)"),
            "{text}"
        );
    }

    let plain = run_sim("jax_prealloc", &["plain"], &capacity, &[]);
    assert!(plain.output.status.success(), "{}", plain.stderr());
    assert_eq!(plain.summary()["preallocations"], serde_json::json!([]));
    for view in ["summary", "oom"] {
        assert!(!plain.view(&[view]).contains("XLA"), "{view} names XLA");
    }
}
