//! PyTorch snapshots beside the traces go to the process that wrote them: by host and pid
//! (a directory shared by several nodes holds the same pid many times) and, when one pid
//! had several images (exec), by time.
//!
//! GIVEN pid 42 on host h1 (rank 0), pid 42 on host h2 (rank 1), and pid 42 on h1 again
//! after an exec (rank 2, starting 1 s later): each writes a snapshot whose history holds
//! one allocation of its own size: h1 1 MiB at 0.1 s, h2 2 MiB at 0.1 s, h1's second image
//! 3 MiB at 1.1 s (named `.1`, its first name being taken).

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const UNIX0: u64 = 1_700_000_000 * S;

/// A snapshot pickle at `path` whose history allocates `size` at `at_ns` (wall clock), as
/// Python's own pickle writes it.
fn snapshot(path: &Path, size: u64, at_ns: u64) {
    let script = r#"
import pickle, sys
size, t_us = int(sys.argv[2]), int(sys.argv[3]) // 1000
trace = [{"action": "alloc", "addr": 1 << 40, "size": size, "stream": 0, "time_us": t_us, "frames": []}]
segment = {"device": 0, "address": 1 << 40, "total_size": size, "stream": 0,
           "segment_type": "large", "frames": [],
           "blocks": [{"address": 1 << 40, "size": size, "requested_size": size,
                       "state": "active_allocated"}]}
pickle.dump({"segments": [segment], "device_traces": [trace]}, open(sys.argv[1], "wb"), protocol=4)
"#;
    let ok = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .arg(size.to_string())
        .arg(at_ns.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "python3 wrote {}", path.display());
}

fn trace(dir: &Path, name: &str, host: &str, start: u64, rank: &str) {
    write_trace(
        dir,
        name,
        &[
            header(42, host, S + start, UNIX0 + start, Some(rank)),
            alloc(50 * MS, 0, "cudaMalloc", 0x1000, 8 * MIB),
            end(500 * MS, 1),
        ],
    );
}

/// The most bytes the allocated series of `rank` shows (the snapshot's tensors: these
/// traces annotate no block), which must be its only series of tensors.
fn allocated_bytes(timeline: &Value, rank: &str) -> Option<u64> {
    let tensors: Vec<&Value> = timeline["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["rank"] == rank && s["layer"].as_str().unwrap().contains("allocated"))
        .collect();
    assert!(tensors.len() <= 1, "one series of tensors: {timeline}");
    tensors.first().map(|s| {
        s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["max_bytes"].as_u64().unwrap())
            .max()
            .unwrap()
    })
}

#[test]
fn each_snapshot_joins_its_own_hosts_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    trace(d, "vramtrace-h1-42.jsonl", "h1", 0, "0");
    trace(d, "vramtrace-h2-42.jsonl", "h2", 0, "1");
    trace(d, "vramtrace-h1-42.1.jsonl", "h1", S, "2");
    snapshot(
        &d.join("torch-snapshot-h1-42.pickle"),
        MIB,
        UNIX0 + 100 * MS,
    );
    snapshot(
        &d.join("torch-snapshot-h2-42.pickle"),
        2 * MIB,
        UNIX0 + 100 * MS,
    );
    snapshot(
        &d.join("torch-snapshot-h1-42.1.pickle"),
        3 * MIB,
        UNIX0 + 1100 * MS,
    );
    let (timeline, code, stderr) = json_view(&["timeline", "--json", d.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        allocated_bytes(&timeline, "0"),
        Some(MIB),
        "h1's first image"
    );
    assert_eq!(allocated_bytes(&timeline, "1"), Some(2 * MIB), "h2's");
    assert_eq!(
        allocated_bytes(&timeline, "2"),
        Some(3 * MIB),
        "h1's exec'd image"
    );
}

/// A snapshot named by pid alone (older versions) still joins its process.
#[test]
fn an_old_name_still_joins_by_pid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    trace(d, "vramtrace-h1-42.jsonl", "h1", 0, "0");
    snapshot(&d.join("torch-snapshot-42.pickle"), MIB, UNIX0 + 100 * MS);
    let (timeline, _, _) = json_view(&["timeline", "--json", d.to_str().unwrap()]);
    assert_eq!(allocated_bytes(&timeline, "0"), Some(MIB));
}

/// A snapshot whose history ends before the only process of its host and pid began (a
/// process of another run) joins nobody, and a note says its tensors are left out.
#[test]
fn a_snapshot_older_than_its_process_is_left_out_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    trace(d, "vramtrace-h1-42.jsonl", "h1", S, "0");
    snapshot(
        &d.join("torch-snapshot-h1-42.pickle"),
        MIB,
        UNIX0 + 100 * MS,
    );
    let (timeline, code, stderr) = json_view(&["timeline", "--json", d.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(allocated_bytes(&timeline, "0"), None, "{timeline}");
    assert!(
        stderr.contains("its history ends before") && stderr.contains("left out"),
        "{stderr}"
    );
}
