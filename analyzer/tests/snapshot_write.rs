//! The memory_viz writer: what it writes reads back through our reader and through
//! Python's own `pickle.load`, with the structure and figures the viewer needs, and only
//! opcodes the viewer's unpickler knows.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use vramtrace_analyzer::snapshot::{
    read_snapshot, write_memory_viz, Action, Block, BlockState, Frame, Segment, Snapshot,
    TraceEntry,
};

const MIB: u64 = 1 << 20;

fn frame(file: &str, line: i64, name: &str) -> Frame {
    Frame {
        filename: Arc::from(file),
        line,
        name: Arc::from(name),
    }
}

fn block(address: u64, size: u64, requested: u64, state: BlockState) -> Block {
    Block {
        address,
        size,
        requested_size: Some(requested),
        state,
        frames: vec![frame("train.py", 7, "step")].into(),
    }
}

fn entry(action: Action, addr: u64, size: u64, time_us: i64) -> TraceEntry {
    TraceEntry {
        action,
        addr,
        size,
        stream: 0,
        time_us: Some(time_us),
        device_free: None,
        extra: Default::default(),
        frames: vec![frame("train.py", 7, "step"), frame("run.py", 1, "<module>")].into(),
    }
}

/// Two devices (0 and 3): device 0 with two segments and a trace ending in an oom,
/// device 3 with one small segment. Addresses above 2^32 need LONG1.
fn model() -> Snapshot {
    let a = 0x7f00_0000_0000u64;
    let b = 0x7f00_4000_0000u64;
    let c = 0x7e00_0000_0000u64;
    let seg = |address, total, kind: &str, blocks| Segment {
        address,
        total_size: total,
        stream: 0,
        segment_type: kind.into(),
        is_expandable: false,
        // What the writer puts in every segment: the default pools.
        segment_pool_id: Some((0, 0)),
        frames: Default::default(),
        blocks,
    };
    let mut oom = entry(Action::Oom, 0, 64 * MIB, 6);
    oom.device_free = Some(3 * MIB);
    let mut s = Snapshot::from_segments(
        [
            (
                0,
                seg(
                    b,
                    20 * MIB,
                    "large",
                    vec![
                        block(b, 12 * MIB, 12 * MIB - 100, BlockState::ActiveAllocated),
                        block(b + 12 * MIB, 8 * MIB, 0, BlockState::Inactive),
                    ],
                ),
            ),
            (
                3,
                seg(
                    c,
                    2 * MIB,
                    "small",
                    vec![
                        block(c, 512, 8, BlockState::ActivePendingFree),
                        block(c + 512, 2 * MIB - 512, 0, BlockState::Inactive),
                    ],
                ),
            ),
            (
                0,
                seg(
                    a,
                    40 * MIB,
                    "large",
                    vec![block(a, 40 * MIB, 40 * MIB, BlockState::ActiveAllocated)],
                ),
            ),
        ],
        [
            (
                0,
                vec![
                    entry(Action::SegmentAlloc, a, 40 * MIB, 1),
                    entry(Action::Alloc, a, 40 * MIB, 2),
                    entry(Action::SegmentAlloc, b, 20 * MIB, 3),
                    entry(Action::Alloc, b, 12 * MIB - 100, 4),
                    entry(Action::Alloc, b + 12 * MIB, MIB, 5),
                    entry(Action::FreeCompleted, b + 12 * MIB, MIB, 5),
                    oom,
                ],
            ),
            (3, vec![entry(Action::SegmentAlloc, c, 2 * MIB, 1)]),
        ],
    );
    s.allocator_settings = Some(
        serde_json::json!({"expandable_segments": false, "max_split_size": -1, "garbage_collection_threshold": 0.5})
            .as_object()
            .unwrap()
            .clone(),
    );
    s
}

fn write(dir: &Path, snap: &Snapshot) -> PathBuf {
    let path = dir.join("viz.pickle");
    write_memory_viz(&path, snap).unwrap();
    path
}

#[test]
fn from_segments_sorts_devices_and_segments() {
    let s = model();
    let devices: Vec<i64> = s.devices.iter().map(|d| d.device).collect();
    assert_eq!(devices, [0, 3]);
    assert!(s.devices[0].segments[0].address < s.devices[0].segments[1].address);
}

#[test]
fn round_trip_through_our_reader() {
    let dir = tempfile::tempdir().unwrap();
    let snap = model();
    let back = read_snapshot(&write(dir.path(), &snap)).unwrap();
    // The written file lists device_traces 0..=3; device 1 and 2 are empty and absent.
    assert_eq!(back.device_count, Some(4));
    assert_eq!(back.devices, snap.devices);
    assert_eq!(back.allocator_settings, snap.allocator_settings);
}

/// Loads the file with Python's pickle and prints what the viewer reads, as JSON; checks the
/// opcodes against the viewer's list and the protocol.
const INSPECT: &str = r#"
import json, pickle, pickletools, sys
data = open(sys.argv[1], 'rb').read()
viewer = {'PROTO', 'APPEND', 'APPENDS', 'LIST', 'TUPLE', 'NEWFALSE', 'NEWTRUE', 'NONE', 'BINGET',
          'BININT', 'BININT1', 'BININT2', 'EMPTY_DICT', 'EMPTY_LIST', 'FRAME', 'LONG1', 'LONG_BINGET',
          'MARK', 'MEMOIZE', 'BINPUT', 'LONG_BINPUT', 'SETITEMS', 'SETITEM', 'DICT', 'SHORT_BINUNICODE',
          'BINUNICODE', 'STOP', 'EMPTY_TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'BINFLOAT'}
ops = set()
proto = None
for op, arg, pos in pickletools.genops(data):
    ops.add(op.name)
    if op.name == 'PROTO':
        proto = arg
    if op.name == 'LONG1':
        assert -(2 ** 63) <= arg < 2 ** 63, arg  # the viewer reads 8 bytes at most
s = pickle.loads(data)
out = {'protocol': proto, 'foreign_opcodes': sorted(ops - viewer), 'keys': sorted(s.keys()),
       'allocator_settings': s.get('allocator_settings'),
       'traces': [[e['action'] for e in t] for t in s['device_traces']], 'devices': {}}
for seg in s['segments']:
    d = out['devices'].setdefault(str(seg['device']), {'R': 0, 'A': 0, 'segments': 0, 'blocks': 0, 'tiled': True})
    d['R'] += seg['total_size']
    d['A'] += sum(b['size'] for b in seg['blocks'] if b['state'] == 'active_allocated')
    d['segments'] += 1
    d['blocks'] += len(seg['blocks'])
    addr = seg['address']
    for b in seg['blocks']:
        d['tiled'] &= b['address'] == addr and isinstance(b['frames'], list) and 'requested_size' in b
        addr += b['size']
    d['tiled'] &= addr == seg['address'] + seg['total_size']
    d['allocated_size_ok'] = d.get('allocated_size_ok', True) and seg['allocated_size'] == sum(
        b['size'] for b in seg['blocks'] if b['state'] == 'active_allocated')
oom = [e for t in s['device_traces'] for e in t if e['action'] == 'oom']
out['oom'] = {k: v for k, v in oom[0].items() if k != 'frames'} if oom else None
out['first_frames'] = s['device_traces'][0][0]['frames']
print(json.dumps(out))
"#;

fn inspect(path: &Path) -> serde_json::Value {
    let out = Command::new("python3")
        .arg("-c")
        .arg(INSPECT)
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python could not load it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn python_loads_what_the_viewer_needs() {
    let dir = tempfile::tempdir().unwrap();
    let v = inspect(&write(dir.path(), &model()));
    assert_eq!(v["protocol"], 4);
    assert_eq!(v["foreign_opcodes"], serde_json::json!([]));
    assert_eq!(
        v["keys"],
        serde_json::json!(["allocator_settings", "device_traces", "segments"])
    );
    assert_eq!(v["allocator_settings"]["max_split_size"], -1);
    assert_eq!(v["allocator_settings"]["garbage_collection_threshold"], 0.5);
    let d0 = &v["devices"]["0"];
    assert_eq!(d0["R"], 60 * MIB);
    assert_eq!(d0["A"], 52 * MIB);
    assert_eq!(
        (d0["segments"].as_u64(), d0["blocks"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(d0["tiled"], true);
    assert_eq!(d0["allocated_size_ok"], true);
    let d3 = &v["devices"]["3"];
    assert_eq!(
        (d3["R"].as_u64(), d3["A"].as_u64()),
        (Some(2 * MIB), Some(0))
    );
    assert_eq!(
        v["traces"],
        serde_json::json!([
            [
                "segment_alloc",
                "alloc",
                "segment_alloc",
                "alloc",
                "alloc",
                "free_completed",
                "oom"
            ],
            [],
            [],
            ["segment_alloc"]
        ])
    );
    assert_eq!(
        v["oom"],
        serde_json::json!({"action": "oom", "device_free": 3 * MIB, "size": 64 * MIB, "stream": 0, "time_us": 6})
    );
    assert_eq!(
        v["first_frames"],
        serde_json::json!([{"filename": "train.py", "line": 7, "name": "step"}, {"filename": "run.py", "line": 1, "name": "<module>"}])
    );
}

#[test]
fn a_real_snapshot_rewritten_keeps_its_readme_figures() {
    if common::fixtures().is_none() {
        return;
    }
    // EoR_NN: R 128.00 MiB, A 46.50 MiB, 10 segments, 54 blocks, 5803 entries (fixture README).
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/torch-snapshots/EoR_NN_snapshot.pickle");
    let snap = read_snapshot(&fixture).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let v = inspect(&write(dir.path(), &snap));
    assert_eq!(v["foreign_opcodes"], serde_json::json!([]));
    let d0 = &v["devices"]["0"];
    assert_eq!(
        format!("{:.2}", d0["R"].as_f64().unwrap() / MIB as f64),
        "128.00"
    );
    assert_eq!(
        format!("{:.2}", d0["A"].as_f64().unwrap() / MIB as f64),
        "46.50"
    );
    assert_eq!(
        (d0["segments"].as_u64(), d0["blocks"].as_u64()),
        (Some(10), Some(54))
    );
    assert_eq!(v["traces"][0].as_array().unwrap().len(), 5803);
    assert_eq!(d0["tiled"], true);
}
