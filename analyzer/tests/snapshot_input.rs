//! A PyTorch snapshot given to `summary` and `oom`, as a user with a `_dump_snapshot()`
//! file would: figures from its segments, and the verdict on its out-of-memory entry.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

mod common;

const MIB: u64 = 1 << 20;

/// Writes, with Python's own pickle, a snapshot of two 20 MiB segments each holding one
/// 10 MiB active block and 10 MiB free, and an `oom` entry for a 15 MiB request.
fn write_snapshot(path: &Path) {
    let script = r#"
import pickle, sys
M = 1 << 20
def segment(addr):
    return {"device": 0, "address": addr, "total_size": 20 * M, "allocated_size": 10 * M,
            "active_size": 10 * M, "requested_size": 10 * M, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [],
            "blocks": [{"address": addr, "size": 10 * M, "requested_size": 10 * M,
                        "state": "active_allocated", "frames": []},
                       {"address": addr + 10 * M, "size": 10 * M, "requested_size": 0,
                        "state": "inactive", "frames": []}]}
snap = {"segments": [segment(1 << 32), segment(2 << 32)],
        "device_traces": [[{"action": "oom", "addr": 0, "size": 15 * M, "stream": 0,
                            "time_us": 1_700_000_000_000_000, "device_free": 2 * M,
                            "frames": [{"filename": "train.py", "line": 88, "name": "forward"}]}]]}
pickle.dump(snap, open(sys.argv[1], "wb"), protocol=4)
"#;
    let ok = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "python3 wrote the snapshot");
}

fn vramtrace(args: &[&str], path: &Path) -> Value {
    let path = path.to_str().unwrap();
    let out = common::vramtrace_ok(&[args, &[path]].concat());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn summary_of_a_snapshot_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.pickle");
    write_snapshot(&path);
    let s = vramtrace(&["summary", "--json"], &path);
    let d = &s["processes"][0]["devices"][0];
    assert_eq!(d["reserved_bytes_at_end"].as_u64(), Some(40 * MIB));
    assert_eq!(d["allocated_bytes_at_end"].as_u64(), Some(20 * MIB));
    assert_eq!(
        d["largest_free_block_bytes_at_end"].as_u64(),
        Some(10 * MIB)
    );
    assert_eq!(d["cached_free_bytes_at_end"].as_u64(), Some(20 * MIB));
    assert!(d["peak_device_bytes"].is_null());
}

#[test]
fn oom_of_a_snapshot_names_fragmentation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.pickle");
    write_snapshot(&path);
    let o = vramtrace(&["oom", "--json"], &path);
    let f = &o["failures"][0];
    assert_eq!(f["requested_bytes"].as_u64(), Some(15 * MIB));
    // The snapshot's figures in the trace's vocabulary: one post-mortem for both.
    assert_eq!(f["driver_free_bytes"].as_u64(), Some(2 * MIB));
    // 20 MiB cached, but no free block of 15 MiB: fragmentation.
    assert_eq!(f["verdict"], "fragmentation");
    assert!(f["advice"][0]
        .as_str()
        .unwrap()
        .contains("expandable_segments"));
    assert_eq!(f["frames"][0]["function"], "forward");
    // The two 10 MiB tensors alive in the final segments were alive at the failure.
    assert_eq!(f["tensor_bytes"].as_u64(), Some(20 * MIB));
}
