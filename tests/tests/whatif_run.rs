//! `vramtrace whatif` on a run directory of the simulated stack: the card other settings
//! are replayed on is the card's memory less what the driver showed in use outside the
//! traced allocations (here the CUDA context the simulated driver charges).

use serde_json::Value;
use vramtrace_tests::harness::{python, run_sim, vramtrace};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const CONTEXT: u64 = 300 * MIB;

/// A snapshot whose history takes one segment of `size` bytes, by Python's own pickle.
const SNAPSHOT: &str = r#"
import pickle, sys
A, size = 0x7f0000000000, int(sys.argv[2])
e = lambda a: {'action': a, 'addr': A, 'size': size, 'stream': 0, 'frames': []}
block = {'address': A, 'size': size, 'requested_size': size, 'state': 'active_allocated', 'frames': []}
seg = {'device': 0, 'address': A, 'total_size': size, 'stream': 0, 'segment_type': 'large',
       'segment_pool_id': (0, 0), 'is_expandable': False, 'frames': [], 'blocks': [block]}
pickle.dump({'segments': [seg], 'device_traces': [[e('segment_alloc'), e('alloc')]]},
            open(sys.argv[1], 'wb'))
"#;

#[test]
fn whatif_replays_other_settings_on_the_card_less_what_lies_outside_the_allocator() {
    let context = CONTEXT.to_string();
    let run = run_sim(
        "demo",
        &[],
        &["--sim-capacity", "24GiB"],
        &[("VRAMTRACE_SIM_CONTEXT_BYTES", &context)],
    );
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let header = &run.traces[0].header;
    // 200 MiB short of the card: it fits on the card, not beside the 300 MiB context.
    let size = 24 * GIB - 200 * MIB;
    let snapshot = run.dir.path().join(format!(
        "torch-snapshot-{}-{}.pickle",
        header.host, header.pid
    ));
    let made = std::process::Command::new(python())
        .args(["-c", SNAPSHOT])
        .arg(&snapshot)
        .arg(size.to_string())
        .status()
        .unwrap();
    assert!(made.success());
    let out = std::process::Command::new(vramtrace())
        .args(["whatif", "--json", "--no-search", "--compare"])
        .args(["--set", "max_split_size_mb:128"])
        .arg(run.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &doc["devices"][0];
    assert_eq!(d["device_layer"]["total_bytes"], 24 * GIB);
    assert_eq!(d["device_layer"]["outside_bytes"], CONTEXT);
    assert_eq!(d["card_bytes"], 24 * GIB - CONTEXT);
    let recorded = &d["scenarios"][0];
    assert_eq!(recorded["drift"], Value::Null);
    let alt = &d["scenarios"][1];
    assert_eq!(alt["driver"]["capacity_bytes"], 24 * GIB - CONTEXT);
    assert_eq!(alt["failures"][0]["entry"], 1);
    assert_eq!(alt["failures"][0]["requested_bytes"], size);
}

/// The calls of `api` the workload counted itself.
fn calls(truth: &Value, api: &str) -> u64 {
    truth["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["api"] == api)
        .map(|c| c["count"].as_u64().unwrap())
        .sum()
}

/// The caching pool of tests/workloads/caching_pool.c annotates its blocks: twelve 5 MiB
/// blocks, every other one freed. Through PyTorch's allocator these take three 20 MiB
/// segments, four blocks each; the cache then holds what the pool's own holds.
#[test]
fn whatif_replays_the_requests_an_allocator_annotated() {
    // Room for three 20 MiB segments beside the 300 MiB context, not a fourth.
    let card = ["--sim-capacity", "370MiB"];
    let run = run_sim("caching_pool", &["fragment"], &card, &[]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let truth = run.truth("caching-pool");
    let frag = run.printed("VRAMTRACE_FRAGMENTED ");
    let whatif = |extra: &[&str]| -> Value {
        let out = std::process::Command::new(vramtrace())
            .args(["whatif", "--json"])
            .args(extra)
            .arg(&run.traces[0].path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let doc = whatif(&[]);
    // The run directory, which has no PyTorch snapshot, replays its one trace the same.
    let out = std::process::Command::new(vramtrace())
        .args(["whatif", "--json"])
        .arg(run.dir.path())
        .output()
        .unwrap();
    let from_dir: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_dir["devices"], doc["devices"]);
    let s = &doc["devices"][0]["scenarios"][0];
    assert_eq!(s["name"], "defaults");
    let events = calls(truth, "vramtrace_block_alloc") + 2 * calls(truth, "vramtrace_block_free");
    assert_eq!(s["events"], events);
    assert_eq!(s["events_replayed"], events);
    assert_eq!(s["peak_reserved_bytes"], 60 * MIB);
    assert_eq!(s["peak_allocated_bytes"], 60 * MIB);
    let cached =
        s["end_reserved_bytes"].as_u64().unwrap() - s["end_allocated_bytes"].as_u64().unwrap();
    assert_eq!(cached, frag["cached_free"].as_u64().unwrap());
    assert_eq!(s["smallest_capacity_bytes"], 60 * MIB);
    // On 50 MiB the ninth block (entry 8) needs a third segment.
    let small = whatif(&["--no-search", "--capacity", "50MiB"]);
    let f = &small["devices"][0]["scenarios"][0]["failures"][0];
    assert_eq!(f["entry"], 8);
    assert_eq!(f["requested_bytes"], 5 * MIB);
}
