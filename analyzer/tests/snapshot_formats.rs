//! What PyTorch 2.9 to 2.15 added to snapshots, written by Python's own `pickle` in
//! protocols 2 to 5 and read into the model: pinned host memory (`host_segments`,
//! `host_traces`), `annotate` entries, `user_metadata` as a string or a dict,
//! `compile_context`, the block state `active_pending_free`, `allocator_settings` with an
//! integer-keyed `roundup_power2_divisions`, private pool ids, addresses above 2^53 and
//! 2^63, keys this reader does not know, and a flag saying the history was truncated.

use serde_json::json;
use std::path::{Path, PathBuf};
use vramtrace_analyzer::snapshot::{figures, read_snapshot, Action, BlockState};

mod common;

const MIB: u64 = 1 << 20;
/// Above 2^53 (a double cannot hold it) and above 2^63 (an i64 cannot).
const MID: u64 = (1 << 53) + 0x20_0000;
const HIGH: u64 = (1 << 63) + 0x1000_0000;

/// Writes `newer-p<protocol>.pickle` and, without the truncation flag, `whole-p<protocol>.pickle`.
const GENERATE: &str = r#"
import pickle, sys, os
out = sys.argv[1]
MIB = 1 << 20
MID, HIGH = (1 << 53) + 0x200000, (1 << 63) + 0x10000000
F = [{'filename': '/home/me/train.py', 'line': 10, 'name': 'forward'}]
segments = [
    {'device': 0, 'address': MID, 'total_size': 2 * MIB, 'allocated_size': 512, 'active_size': 1536,
     'requested_size': 1100, 'stream': 0, 'segment_type': 'small', 'segment_pool_id': (0, 0),
     'is_expandable': False, 'frames': F, 'a_key_from_the_future': [1, {'x': None}], 'blocks': [
        {'address': MID, 'size': 512, 'requested_size': 100, 'state': 'active_allocated', 'frames': F},
        {'address': MID + 512, 'size': 1024, 'requested_size': 1000, 'state': 'active_pending_free', 'frames': F},
        {'address': MID + 1536, 'size': 2 * MIB - 1536, 'requested_size': 0, 'state': 'inactive', 'frames': []}]},
    {'device': 0, 'address': HIGH, 'total_size': 20 * MIB, 'stream': 7, 'segment_type': 'large',
     'segment_pool_id': (1, 3), 'is_expandable': False, 'frames': [], 'blocks': [
        {'address': HIGH, 'size': 20 * MIB, 'requested_size': 20 * MIB, 'state': 'active_allocated', 'frames': F}]}]
def e(action, addr, size, t, **more):
    d = {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': F}
    d.update(more)
    return d
trace = [
    e('segment_alloc', HIGH, 20 * MIB, 1000),
    e('alloc', HIGH, 20 * MIB, 1001, user_metadata='step 3'),
    {'action': 'annotate', 'time_us': 1002, 'stage': 'START', 'name': 'backward'},
    e('alloc', MID, 100, 1003, user_metadata={'phase': 'forward', 'step': '3'},
      compile_context='[0/0] forward'),
    e('alloc', MID + 512, 1000, 1004),
    e('free_requested', MID + 512, 1000, 1005),
]
settings = {'PYTORCH_CUDA_ALLOC_CONF': 'roundup_power2_divisions:[256:4,>:8]',
    'max_split_size': -1, 'garbage_collection_threshold': 0.0, 'expandable_segments': False,
    'roundup_power2_divisions': {1: 0, 256: 4, 512: 8}}
host_segments = [{'device': 0, 'address': 0x50000000, 'total_size': 4 * MIB, 'stream': 0,
    'segment_type': 'large', 'blocks': [
        {'address': 0x50000000, 'size': 4 * MIB, 'requested_size': 4 * MIB, 'state': 'active_allocated', 'frames': F}]}]
host_traces = [[e('alloc', 0x50000000, 4 * MIB, 999)]]
for p in range(2, 6):
    snap = {'segments': segments, 'device_traces': [trace], 'allocator_settings': settings,
            'host_segments': host_segments, 'host_traces': host_traces, 'external_annotations': []}
    with open(os.path.join(out, 'whole-p%d.pickle' % p), 'wb') as f:
        pickle.dump(snap, f, protocol=p)
    snap['device_traces_truncated'] = [True]
    with open(os.path.join(out, 'newer-p%d.pickle' % p), 'wb') as f:
        pickle.dump(snap, f, protocol=p)
print('[]')
"#;

fn generate() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    common::python_list(GENERATE, &[dir.path()]);
    let p = dir.path().to_path_buf();
    (dir, p)
}

fn path(dir: &Path, name: &str, protocol: u8) -> PathBuf {
    dir.join(format!("{name}-p{protocol}.pickle"))
}

#[test]
fn every_newer_key_is_read_into_the_model() {
    let (_keep, dir) = generate();
    for protocol in 2..=5 {
        let s = read_snapshot(&path(&dir, "newer", protocol)).unwrap_or_else(|e| panic!("{e}"));
        let at = format!("protocol {protocol}");
        let d = &s.devices[0];
        let addrs: Vec<u64> = d.segments.iter().map(|s| s.address).collect();
        assert_eq!(addrs, [MID, HIGH], "{at}");
        let pools: Vec<_> = d.segments.iter().map(|s| s.segment_pool_id).collect();
        assert_eq!(pools, [Some((0, 0)), Some((1, 3))], "{at}");
        assert_eq!(
            d.segments[0].blocks[1].state,
            BlockState::ActivePendingFree,
            "{at}"
        );
        let f = figures(d);
        assert_eq!(
            (f.reserved, f.allocated, f.pending_free),
            (22 * MIB, 20 * MIB + 512, 1024),
            "{at}"
        );

        let actions: Vec<&str> = d.trace.iter().map(|e| e.action.name()).collect();
        assert_eq!(
            actions,
            [
                "segment_alloc",
                "alloc",
                "annotate",
                "alloc",
                "alloc",
                "free_requested"
            ],
            "{at}"
        );
        assert_eq!(d.trace[2].action, Action::Other("annotate".into()));
        assert_eq!(d.trace[2].extra["stage"], "START", "{at}");
        assert_eq!(d.trace[2].extra["name"], "backward", "{at}");
        assert_eq!(d.trace[1].addr, HIGH, "{at}");
        assert_eq!(d.trace[1].user_metadata(), Some(&json!("step 3")), "{at}");
        assert_eq!(
            d.trace[3].user_metadata(),
            Some(&json!({"phase": "forward", "step": "3"})),
            "{at}"
        );
        assert_eq!(d.trace[3].compile_context(), Some(&json!("[0/0] forward")));
        assert!(d.trace[4].extra.is_empty(), "{at}");

        let set = s.allocator_settings.as_ref().expect("settings");
        assert_eq!(
            set["roundup_power2_divisions"],
            json!({"1": 0, "256": 4, "512": 8}),
            "{at}"
        );

        assert_eq!(s.host_segments.len(), 1, "{at}");
        assert_eq!(s.host_segments[0].total_size, 4 * MIB, "{at}");
        assert_eq!(s.host_traces.len(), 1, "{at}");
        assert_eq!(s.host_traces[0].size, 4 * MIB, "{at}");
        assert_eq!(s.history_truncated, ["device_traces_truncated"], "{at}");

        let whole = read_snapshot(&path(&dir, "whole", protocol)).unwrap();
        assert!(whole.history_truncated.is_empty(), "{at}");
    }
}

#[test]
fn summary_says_when_the_history_was_truncated() {
    let (_keep, dir) = generate();
    let newer = path(&dir, "newer", 4);
    let whole = path(&dir, "whole", 4);
    let (v, code, _) = common::json_view(&["summary", "--json", newer.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let p = &v["processes"][0];
    assert_eq!(p["history_truncated"], true);
    // Host memory is not device memory: 2 MiB + 20 MiB reserved, the tensors' requested
    // bytes 20 MiB + 100 + 1000 (the pending free still counts until it completes).
    assert_eq!(p["devices"][0]["peak_reserved_bytes"], 22 * MIB);
    assert_eq!(p["devices"][0]["peak_requested_bytes"], 20 * MIB + 1100);
    let (v, _, _) = common::json_view(&["summary", "--json", whole.to_str().unwrap()]);
    assert_eq!(v["processes"][0]["history_truncated"], false);

    let text = |p: &Path| {
        let out = common::vramtrace_ok(&["summary", p.to_str().unwrap()]);
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(
        text(&newer).contains("history truncated"),
        "{}",
        text(&newer)
    );
    assert!(!text(&whole).contains("history truncated"));
}
