//! A directory of per-rank PyTorch snapshots, written with the keys newer PyTorch
//! versions add, read as one run: each rank's peak at both layers, which rank peaked
//! highest and which failed, checked against a replay written here in Python.

use serde_json::Value;
use std::path::Path;

mod common;

/// Writes `snapshot_rank{0,1}.pickle` into the directory, and prints per rank what a
/// replay of them gives: the most requested bytes of live tensors and the most reserved
/// bytes (the state before the history rebuilt by undoing it from the final segments),
/// and the number of `oom` entries.
///
/// The files carry what PyTorch 2.9+ adds: `host_segments`/`host_traces`, an `annotate`
/// entry, `user_metadata` (a string and a dict), `compile_context`, an
/// `active_pending_free` block, `allocator_settings` with a dict-keyed
/// `roundup_power2_divisions`, a private pool's `segment_pool_id`, addresses above 2^53,
/// and a key no version has written.
const WRITE_AND_REPLAY: &str = r#"
import json, pickle, sys
M = 1 << 20
out = sys.argv[1]
result = []
for rank in (0, 1):
    base = (1 << 60) + rank * (1 << 40)
    first, second = base, base + (1 << 30)
    t = 1_800_000_000_000_000 + rank * 7
    fr = lambda name, line: [{"filename": "/home/me/train.py", "line": line, "name": name}]
    segments = [
        {"device": rank, "address": first, "total_size": 20 * M, "stream": 0,
         "segment_type": "large", "segment_pool_id": (rank, rank * 2), "is_expandable": False,
         "frames": [], "blocks": [
            {"address": first, "size": 4 * M, "requested_size": 4 * M - 100,
             "state": "active_allocated", "frames": fr("init", 10)},
            {"address": first + 4 * M, "size": 2 * M, "requested_size": 2 * M,
             "state": "active_pending_free", "frames": fr("init", 11)},
            {"address": first + 6 * M, "size": 14 * M, "requested_size": 0,
             "state": "inactive", "frames": []}]},
        {"device": rank, "address": second, "total_size": 20 * M, "stream": 0,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
         "frames": [], "blocks": [
            {"address": second, "size": 10 * M, "requested_size": 0, "state": "inactive",
             "frames": []},
            {"address": second + 10 * M, "size": 3 * M, "requested_size": 3 * M,
             "state": "active_allocated", "frames": fr("forward", 41)},
            {"address": second + 13 * M, "size": 7 * M, "requested_size": 0,
             "state": "inactive", "frames": []}]},
    ]
    e = lambda action, addr, size, dt, **kw: dict(
        {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t + dt,
         "frames": fr("forward", 40)}, **kw)
    # The first tensor's block rounds up to 10 MiB, so the second starts where the
    # allocator would place it (a layout the allocator could not make is a drift).
    history = [
        e("annotate", 0, 0, 1, user_metadata="step 1", compile_context="N/A"),
        e("segment_alloc", second, 20 * M, 2),
        e("alloc", second, 10 * M - rank * 100, 3, user_metadata={"phase": "fwd"}),
        e("alloc", second + 10 * M, 3 * M, 4),
        e("free_requested", second, 10 * M - rank * 100, 5),
        e("free_completed", second, 10 * M - rank * 100, 6),
    ]
    if rank == 1:
        history.append(e("oom", 0, 30 * M, 7, device_free=M))
    snap = {"segments": segments, "device_traces": [[] for _ in range(rank)] + [history],
            "host_segments": [], "host_traces": [[]],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "",
                                   "roundup_power2_divisions": {1: 4, 2: 8},
                                   "expandable_segments": False},
            "user_metadata": {"job": "ranks"}, "a_key_from_the_future": [1, 2]}
    pickle.dump(snap, open(f"{out}/snapshot_rank{rank}.pickle", "wb"), protocol=4)

    # The replay, from the file as Python reads it back.
    snap = pickle.load(open(f"{out}/snapshot_rank{rank}.pickle", "rb"))
    trace = snap["device_traces"][rank]
    reserved = {s["address"]: s["total_size"] for s in snap["segments"]}
    alive = {b["address"]: b["requested_size"] for s in snap["segments"]
             for b in s["blocks"] if b["state"] != "inactive"}
    for x in reversed(trace):
        if x["action"] == "segment_alloc": del reserved[x["addr"]]
        elif x["action"] == "segment_free": reserved[x["addr"]] = x["size"]
        elif x["action"] == "alloc": del alive[x["addr"]]
        elif x["action"] == "free_completed": alive[x["addr"]] = x["size"]
    peak_requested = requested = sum(alive.values())
    peak_reserved = held = sum(reserved.values())
    for x in trace:
        if x["action"] == "segment_alloc": held += x["size"]
        elif x["action"] == "segment_free": held -= x["size"]
        elif x["action"] == "alloc": alive[x["addr"]] = x["size"]; requested += x["size"]
        elif x["action"] == "free_completed": requested -= alive.pop(x["addr"])
        peak_requested = max(peak_requested, requested)
        peak_reserved = max(peak_reserved, held)
    result.append({"rank": str(rank), "peak_requested_bytes": peak_requested,
                   "peak_reserved_bytes": peak_reserved,
                   "failed_allocations": sum(x["action"] == "oom" for x in trace)})
print(json.dumps(result))
"#;

fn write(dir: &Path) -> Vec<Value> {
    common::python_list(WRITE_AND_REPLAY, &[dir])
}

#[test]
fn a_directory_of_rank_snapshots_gives_a_table_of_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let truth = write(dir.path());
    let path = dir.path().to_str().unwrap();
    let out = common::vramtrace_ok(&["summary", "--json", path]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranks = summary["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), truth.len(), "{summary}");
    let top = truth
        .iter()
        .map(|t| t["peak_requested_bytes"].as_u64().unwrap())
        .max();
    for (row, t) in ranks.iter().zip(&truth) {
        assert_eq!(row["rank"], t["rank"]);
        assert_eq!(
            row["peak_requested_bytes"], t["peak_requested_bytes"],
            "{row}"
        );
        assert_eq!(
            row["peak_reserved_bytes"], t["peak_reserved_bytes"],
            "{row}"
        );
        assert_eq!(row["failed_allocations"], t["failed_allocations"], "{row}");
        let highest = t["peak_requested_bytes"].as_u64() == top;
        assert_eq!(row["highest"], highest, "{row}");
    }
    let out = common::vramtrace_ok(&["summary", path]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("<- highest peak"), "{text}");
    // Each history began after the first segment and its two tensors: said once per
    // device in the summary, and not on stderr (the normal case for a snapshot).
    assert_eq!(
        text.matches("its history begins after the start (1 segment and 2 tensors")
            .count(),
        2,
        "{text}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("history"), "{stderr}");
    let json = common::vramtrace_ok(&["summary", "--json", path]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    for p in json["processes"].as_array().unwrap() {
        let b = &p["devices"][0]["before_history"];
        assert_eq!(
            (b["segments"].as_u64(), b["tensors"].as_u64()),
            (Some(1), Some(2)),
            "{b}"
        );
    }
    // The other views read the same directory.
    for view in [&["peak"][..], &["oom"], &["leaks"], &["timeline"]] {
        common::vramtrace_ok(&[view, &[path]].concat());
    }
}
