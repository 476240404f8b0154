//! Snapshots of every format generation, written by Python's own `pickle` in each protocol,
//! read back with figures worked out by hand; and pickles that carry code, refused.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use serde_json::Value;
use vramtrace_analyzer::snapshot::{figures, read_snapshot, Action, Generation, Snapshot};

const MIB: u64 = 1 << 20;

/// Writes `<case>-p<protocol>.pickle` for protocols 0-5, and `evil-*.pickle` with
/// `refusals.json` (the first code-carrying opcode of each and its offset, by pickletools).
const GENERATE: &str = r#"
import json, os, pickle, pickletools, sys
out = sys.argv[1]
MIB = 1 << 20
F = [{'filename': 'train.py', 'line': 10, 'name': 'forward'}]

# 2.0: blocks carry history, no address, no requested_size; no time_us.
A = 0x7f0000000000
history = {'segments': [{
    'device': 0, 'address': A, 'total_size': 20 * MIB, 'allocated_size': 16 * MIB,
    'active_size': 16 * MIB, 'stream': 0, 'segment_type': 'large', 'blocks': [
        {'size': 6 * MIB, 'state': 'active_allocated',
         'history': [{'addr': A, 'real_size': 6000000, 'frames': F}]},
        {'size': 4 * MIB, 'state': 'inactive',
         'history': [{'addr': A + 6 * MIB, 'real_size': 1, 'frames': []}]},
        {'size': 10 * MIB, 'state': 'active_allocated',
         'history': [{'addr': A + 10 * MIB, 'real_size': 10 * MIB - 512, 'frames': F}]},
    ]}],
    'device_traces': [[{'action': 'snapshot', 'addr': 0, 'size': 0, 'stream': 0}]]}

# 2.2+: addresses, requested sizes, frames, time_us; a pending free; the small pool.
S = 0x7f1000000000
def small(with_time):
    def e(action, addr, size, t):
        d = {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'frames': F}
        if with_time:
            d['time_us'] = t
        return d
    return {'segments': [{
        'device': 0, 'address': S, 'total_size': 2 * MIB, 'stream': 0,
        'segment_type': 'small', 'segment_pool_id': (0, 0), 'is_expandable': False,
        'frames': F, 'blocks': [
            {'address': S, 'size': 512, 'requested_size': 100, 'state': 'active_allocated', 'frames': F},
            {'address': S + 512, 'size': 1024, 'requested_size': 1000, 'state': 'active_pending_free', 'frames': F},
            {'address': S + 1536, 'size': 2 * MIB - 1536, 'requested_size': 0, 'state': 'inactive', 'frames': []},
        ]}],
        'device_traces': [[e('segment_alloc', S, 2 * MIB, 1000), e('alloc', S, 100, 1001),
                           e('alloc', S + 512, 1000, 1002), e('free_requested', S + 512, 1000, 1003)]]}

# 2.3+: allocator_settings and external_annotations.
B = 0x7f2000000000
C = 0x7f3000000000
def large_segments(device):
    return [
        {'device': device, 'address': B, 'total_size': 40 * MIB, 'stream': 0, 'segment_type': 'large',
         'is_expandable': False, 'frames': [], 'blocks': [
            {'address': B, 'size': 8 * MIB, 'requested_size': 8 * MIB, 'state': 'active_allocated', 'frames': F},
            {'address': B + 8 * MIB, 'size': 12 * MIB, 'requested_size': 0, 'state': 'inactive', 'frames': []},
            {'address': B + 20 * MIB, 'size': 20 * MIB, 'requested_size': 20 * MIB - 1000, 'state': 'active_allocated', 'frames': F}]},
        {'device': device, 'address': C, 'total_size': 30 * MIB, 'stream': 0, 'segment_type': 'large',
         'is_expandable': False, 'frames': [], 'blocks': [
            {'address': C, 'size': 30 * MIB, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}]
settings = {'segments': large_segments(0), 'device_traces': [[]],
    'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': 'max_split_size_mb:128', 'max_split_size': 128 * MIB,
        'garbage_collection_threshold': 0.6, 'expandable_segments': False, 'roundup_power2_divisions': {'1': 0}},
    'external_annotations': []}

# Expandable segments: pages mapped and unmapped.
E = 0x7f4000000000
def t(action, addr, size, ts):
    return {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': ts, 'frames': []}
expandable = {'segments': [{
    'device': 0, 'address': E, 'total_size': 40 * MIB, 'stream': 0, 'segment_type': 'large',
    'is_expandable': True, 'frames': [], 'blocks': [
        {'address': E, 'size': 25 * MIB, 'requested_size': 25 * MIB, 'state': 'active_allocated', 'frames': F},
        {'address': E + 25 * MIB, 'size': 15 * MIB, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}],
    'device_traces': [[t('segment_map', E, 20 * MIB, 1), t('segment_map', E + 20 * MIB, 20 * MIB, 2),
                       t('alloc', E, 25 * MIB, 3), t('segment_map', E + 40 * MIB, 20 * MIB, 4),
                       t('segment_unmap', E + 40 * MIB, 20 * MIB, 5)]]}

# An oom entry, three devices of which 0 and 2 hold memory.
D0 = 0x7f5000000000
D2 = 0x7f6000000000
oom = {'segments': [
    {'device': 0, 'address': D0, 'total_size': 20 * MIB, 'stream': 0, 'segment_type': 'large',
     'is_expandable': False, 'frames': [], 'blocks': [
        {'address': D0, 'size': 18 * MIB, 'requested_size': 18 * MIB, 'state': 'active_allocated', 'frames': F},
        {'address': D0 + 18 * MIB, 'size': 2 * MIB, 'requested_size': 0, 'state': 'inactive', 'frames': []}]},
    {'device': 2, 'address': D2, 'total_size': 2 * MIB, 'stream': 0, 'segment_type': 'small',
     'is_expandable': False, 'frames': [], 'blocks': [
        {'address': D2, 'size': 2 * MIB, 'requested_size': 0, 'state': 'inactive', 'frames': []}]}],
    'device_traces': [
        [t('segment_alloc', D0, 20 * MIB, 10), t('alloc', D0, 18 * MIB, 11),
         {'action': 'oom', 'device_free': MIB, 'size': 4 * MIB, 'stream': 0, 'time_us': 12,
          'frames': [{'filename': 'model.py', 'line': 42, 'name': 'forward'}]}],
        [],
        [t('segment_alloc', D2, 2 * MIB, 5)]]}

cases = {'history': history, 'small': small(True), 'no_time': small(False), 'settings': settings,
         'expandable': expandable, 'oom': oom, 'bare': large_segments(1)}
for name, obj in cases.items():
    for p in range(6):
        with open(os.path.join(out, '%s-p%d.pickle' % (name, p)), 'wb') as f:
            pickle.dump(obj, f, protocol=p)

marker = os.path.join(out, 'EXECUTED')
class Evil:
    def __reduce__(self):
        return (os.system, ('touch ' + marker,))
class Plain:
    pass
plain = Plain()
plain.segments = []
evil = {}
for p in range(6):
    evil['reduce-p%d' % p] = pickle.dumps({'segments': [], 'x': Evil()}, protocol=p)
    evil['instance-p%d' % p] = pickle.dumps(plain, protocol=p)
evil['build'] = b'\x80\x04]\x94}\x94b.'
evil['newobj'] = b'\x80\x04)\x94)\x81.'
evil['persid'] = b'\x80\x04K\x01Q.'
refusals = {}
for name, data in evil.items():
    with open(os.path.join(out, 'evil-%s.pickle' % name), 'wb') as f:
        f.write(data)
    code = {'GLOBAL', 'STACK_GLOBAL', 'REDUCE', 'BUILD', 'INST', 'OBJ', 'NEWOBJ', 'NEWOBJ_EX',
            'EXT1', 'EXT2', 'EXT4', 'PERSID', 'BINPERSID', 'NEXT_BUFFER', 'READONLY_BUFFER'}
    first = next((op.name, pos) for op, arg, pos in pickletools.genops(data) if op.name in code)
    refusals['evil-%s.pickle' % name] = first
with open(os.path.join(out, 'refusals.json'), 'w') as f:
    json.dump(refusals, f)
"#;

fn generate() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(GENERATE)
        .arg(dir.path())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = dir.path().to_path_buf();
    (dir, p)
}

/// The case in every protocol, all read alike.
fn each_protocol(dir: &Path, case: &str, check: impl Fn(&Snapshot, u8)) {
    for p in 0..=5u8 {
        let path = dir.join(format!("{case}-p{p}.pickle"));
        let snap = read_snapshot(&path).unwrap_or_else(|e| panic!("{e}"));
        check(&snap, p);
    }
}

/// `vramtrace snapshot --json` of `<case>-p<protocol>.pickle`: its devices, by ordinal.
fn snapshot_json(dir: &Path, case: &str, p: u8) -> Vec<Value> {
    let path = dir.join(format!("{case}-p{p}.pickle"));
    let out = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(["snapshot", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["devices"].as_array().unwrap().clone()
}

#[test]
fn generation_2_0_history_blocks() {
    let (_keep, dir) = generate();
    each_protocol(&dir, "history", |s, p| {
        assert_eq!(s.generation, Generation::History, "protocol {p}");
        let d = &s.devices[0];
        let f = figures(d);
        assert_eq!(f.reserved, 20 * MIB);
        assert_eq!(f.allocated, 16 * MIB);
        // requested from the last history entry of each active block: 6000000 + (10 MiB - 512)
        assert_eq!(f.requested, Some(16_485_248));
        assert_eq!(f.internal, Some(16 * MIB - 16_485_248));
        assert_eq!(
            (f.free, f.free_blocks, f.largest_free),
            (4 * MIB, 1, 4 * MIB)
        );
        let a = 0x7f00_0000_0000u64;
        let addrs: Vec<u64> = d.segments[0].blocks.iter().map(|b| b.address).collect();
        assert_eq!(addrs, [a, a + 6 * MIB, a + 10 * MIB]);
        assert_eq!(&*d.segments[0].blocks[0].frames[0].name, "forward");
        assert_eq!(d.trace.len(), 1);
        assert_eq!(d.trace[0].action, Action::Snapshot);
        assert_eq!(d.trace[0].time_us, None);
    });
}

#[test]
fn generation_2_2_small_pool_pending_free_with_and_without_time() {
    let (_keep, dir) = generate();
    for case in ["small", "no_time"] {
        each_protocol(&dir, case, |s, p| {
            let d = &s.devices[0];
            let f = figures(d);
            assert_eq!(f.reserved, 2 * MIB, "{case} protocol {p}");
            assert_eq!(f.allocated, 512);
            assert_eq!(f.requested, Some(100));
            assert_eq!(f.internal, Some(412));
            assert_eq!(f.pending_free, 1024);
            assert_eq!(f.free, 2 * MIB - 1536);
            assert_eq!(f.free_blocks, 1);
            assert_eq!(f.largest_free_small, 2 * MIB - 1536);
            assert_eq!(f.largest_free_large, 0);
            assert_eq!(f.reserved, f.allocated + f.pending_free + f.free);
            let times: Vec<Option<i64>> = d.trace.iter().map(|e| e.time_us).collect();
            if case == "small" {
                assert_eq!(times, [Some(1000), Some(1001), Some(1002), Some(1003)]);
            } else {
                assert_eq!(times, [None; 4]);
            }
            // Its history starts with the process: nothing before its first entry.
            let j = &snapshot_json(&dir, case, p)[0];
            assert_eq!(j["trace_start_reserved_bytes"], 0, "{j}");
            assert_eq!(j["trace_start_requested_bytes"], 0, "{j}");
            assert_eq!(j["trace_consistent"], true, "{j}");
        });
    }
}

#[test]
fn generation_2_3_allocator_settings() {
    let (_keep, dir) = generate();
    each_protocol(&dir, "settings", |s, p| {
        let set = s.allocator_settings.as_ref().expect("settings");
        assert_eq!(
            set["PYTORCH_CUDA_ALLOC_CONF"], "max_split_size_mb:128",
            "protocol {p}"
        );
        assert_eq!(set["max_split_size"], 128 * MIB);
        assert_eq!(set["garbage_collection_threshold"], 0.6);
        assert_eq!(set["expandable_segments"], false);
        let f = figures(&s.devices[0]);
        assert_eq!(f.reserved, 70 * MIB);
        assert_eq!(f.allocated, 28 * MIB);
        assert_eq!(f.requested, Some(28 * MIB - 1000));
        assert_eq!(f.internal, Some(1000));
        assert_eq!(
            (f.free, f.free_blocks, f.largest_free),
            (42 * MIB, 2, 30 * MIB)
        );
        let ratio = f.external_ratio().unwrap();
        assert!((ratio - 12.0 / 42.0).abs() < 1e-12);
    });
}

#[test]
fn expandable_segments_map_and_unmap() {
    let (_keep, dir) = generate();
    each_protocol(&dir, "expandable", |s, p| {
        let d = &s.devices[0];
        let f = figures(d);
        assert_eq!(f.expandable_segments, 1, "protocol {p}");
        assert_eq!(
            (f.reserved, f.allocated, f.free),
            (40 * MIB, 25 * MIB, 15 * MIB)
        );
        // Mapped 20, 20 and 20 MiB, then 20 unmapped: from nothing, 60 MiB at most.
        let j = &snapshot_json(&dir, "expandable", p)[0];
        assert_eq!(j["trace_start_reserved_bytes"], 0, "{j}");
        assert_eq!(j["trace_consistent"], true, "{j}");
        let out = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
            .args(["summary", "--json"])
            .arg(dir.join(format!("expandable-p{p}.pickle")))
            .output()
            .unwrap();
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        let dev = &summary["processes"][0]["devices"][0];
        assert_eq!(dev["peak_reserved_bytes"], 60 * MIB, "{dev}");
        assert_eq!(d.trace[4].action, Action::SegmentUnmap);
    });
}

#[test]
fn oom_entry_on_one_of_several_devices() {
    let (_keep, dir) = generate();
    each_protocol(&dir, "oom", |s, p| {
        assert_eq!(s.device_count, Some(3), "protocol {p}");
        let devs: Vec<i64> = s.devices.iter().map(|d| d.device).collect();
        assert_eq!(devs, [0, 2]);
        let d0 = s.device(0).unwrap();
        let f = figures(d0);
        assert_eq!(
            (f.reserved, f.allocated, f.largest_free),
            (20 * MIB, 18 * MIB, 2 * MIB)
        );
        let ooms = &snapshot_json(&dir, "oom", p)[0]["ooms"];
        assert_eq!(ooms.as_array().unwrap().len(), 1, "{ooms}");
        let o = &ooms[0];
        assert_eq!(
            (&o["index"], &o["requested_bytes"], &o["device_free_bytes"]),
            (&2.into(), &(4 * MIB).into(), &MIB.into())
        );
        assert_eq!(
            (&o["reserved_bytes"], &o["allocated_bytes"], &o["time_us"]),
            (&(20 * MIB).into(), &(18 * MIB).into(), &12.into())
        );
        assert_eq!(o["frames"][0]["filename"], "model.py");
        assert_eq!(o["frames"][0]["line"], 42);
        let f2 = figures(s.device(2).unwrap());
        assert_eq!((f2.reserved, f2.allocated, f2.free), (2 * MIB, 0, 2 * MIB));
        assert_eq!(s.device(2).unwrap().trace.len(), 1);
    });
}

#[test]
fn bare_segment_list() {
    let (_keep, dir) = generate();
    each_protocol(&dir, "bare", |s, p| {
        assert_eq!(s.generation, Generation::SegmentList, "protocol {p}");
        assert_eq!(s.device_count, None);
        assert_eq!(s.devices.len(), 1);
        assert_eq!(s.devices[0].device, 1);
        let f = figures(&s.devices[0]);
        assert_eq!((f.segments, f.blocks), (2, 4));
        assert_eq!((f.reserved, f.allocated), (70 * MIB, 28 * MIB));
    });
}

#[test]
fn code_carrying_pickles_are_refused_with_file_offset_and_opcode() {
    let (_keep, dir) = generate();
    let refusals: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("refusals.json")).unwrap()).unwrap();
    let refusals = refusals.as_object().unwrap();
    assert_eq!(refusals.len(), 15);
    for (file, first) in refusals {
        let (name, pos) = (first[0].as_str().unwrap(), first[1].as_u64().unwrap());
        let path = dir.join(file);
        let err = read_snapshot(&path).expect_err(file);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(&format!("byte {pos}: ")), "{file}: {err}");
        assert!(
            err.contains(&format!("refused opcode {name} ")),
            "{file}: {err}"
        );
    }
    assert!(!dir.join("EXECUTED").exists());
}

#[test]
fn the_cli_refuses_a_malicious_pickle_and_runs_nothing() {
    let (_keep, dir) = generate();
    let evil = dir.join("evil-reduce-p4.pickle");
    let out = common::vramtrace(&["snapshot", evil.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused opcode STACK_GLOBAL"), "{err}");
    assert!(!dir.join("EXECUTED").exists());
}

#[test]
fn the_cli_reports_figures_and_the_oom_as_json() {
    let (_keep, dir) = generate();
    let oom = dir.join("oom-p4.pickle");
    let oom = oom.to_str().unwrap();
    let out = common::vramtrace_ok(&["snapshot", "--json", oom]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "vramtrace-snapshot");
    let d0 = &v["devices"][0];
    assert_eq!(d0["device"], 0);
    assert_eq!(d0["reserved_bytes"], 20 * MIB);
    assert_eq!(d0["allocated_bytes"], 18 * MIB);
    assert_eq!(d0["free_bytes"], 2 * MIB);
    assert_eq!(d0["largest_free_block_bytes"], 2 * MIB);
    assert_eq!(d0["ooms"][0]["requested_bytes"], 4 * MIB);
    assert_eq!(d0["ooms"][0]["device_free_bytes"], MIB);
    assert_eq!(d0["ooms"][0]["reserved_bytes"], 20 * MIB);
    assert_eq!(v["devices"][1]["device"], 2);
    let text = common::vramtrace_ok(&["snapshot", oom]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("tried to allocate 4.0 MiB with 20.0 MiB reserved"),
        "{text}"
    );
}
