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
