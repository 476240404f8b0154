//! A large snapshot (a history of ~100,000 entries, a few MB) with the real frames of a
//! fixture, shared as PyTorch's pickler shares them, read by the views and checked against
//! a replay written here in Python over Python's own `pickle`. Its reading speed is
//! measured by `scripts/bench.sh`, never asserted here.

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/torch-snapshots/EoR_NN_snapshot.pickle")
}

/// Writes OUT: one 16 GiB segment, a random stream of allocations (bump-allocated, never
/// reused) and frees, each allocation with one of the fixture's own frame lists (the same
/// list objects, so the pickle shares them), and the final blocks that stream leaves.
const GENERATE: &str = r#"
import pickle, random, sys
src, out, n, protocol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
real = pickle.load(open(src, "rb"))
stacks, seen = [], set()
for e in real["device_traces"][0]:
    f = e.get("frames")
    if f and id(f) not in seen:
        seen.add(id(f)); stacks.append(f)
random.seed(12)
SEG, SEG_SIZE = 0x7f0000000000, 16 << 30
t = 1738780408787504
def entry(action, addr, size, frames):
    global t
    t += random.randint(0, 40)
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames}
trace = [entry("segment_alloc", SEG, SEG_SIZE, [])]
live, order, bump = {}, [], SEG
for i in range(n):
    if order and random.random() < 0.48:
        addr = order.pop(random.randrange(len(order)))
        size, block, frames = live.pop(addr)
        trace.append(entry("free_requested", addr, size, frames))
        trace.append(entry("free_completed", addr, size, frames))
    else:
        size = random.choice([512, 4096, 65536, 1 << 20]) - random.randrange(0, 500)
        block = (size + 511) // 512 * 512
        frames = random.choice(stacks)
        live[bump] = (size, block, frames); order.append(bump)
        trace.append(entry("alloc", bump, size, frames))
        bump += block
assert bump <= SEG + SEG_SIZE
blocks, at = [], SEG
for addr in sorted(live):
    if addr > at:
        blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive", "frames": []})
    size, block, frames = live[addr]
    blocks.append({"address": addr, "size": block, "requested_size": size, "state": "active_allocated", "frames": frames})
    at = addr + block
if at < SEG + SEG_SIZE:
    blocks.append({"address": at, "size": SEG + SEG_SIZE - at, "requested_size": 0, "state": "inactive", "frames": []})
snap = {"segments": [{"device": 0, "address": SEG, "total_size": SEG_SIZE, "stream": 0,
    "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
    "blocks": blocks}], "device_traces": [trace]}
with open(out, "wb") as f:
    pickle.dump(snap, f, protocol=protocol)
print("[]")
"#;

/// The figures, from the file as Python's `pickle` reads it: the most requested bytes of
/// live tensors (a tensor counts from `alloc` to `free_completed`) and how many were live
/// then, the function holding the most at that moment (the innermost Python frame outside
/// torch, site-packages and the standard library, else the innermost Python frame), the
/// reserved peak, and the events the
/// history stands for (segment allocations, tensor allocations and frees).
const TRUTH: &str = r#"
import json, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
trace = snap["device_traces"][0]
alive, live, peak, at_peak, reserved, peak_reserved = {}, 0, 0, {}, 0, 0
for e in trace:
    a = e["action"]
    if a == "alloc":
        alive[e["addr"]] = (e["size"], e["frames"]); live += e["size"]
    elif a == "free_completed":
        live -= alive.pop(e["addr"])[0]
    elif a == "segment_alloc":
        reserved += e["size"]; peak_reserved = max(peak_reserved, reserved)
    if live > peak:
        peak, at_peak = live, dict(alive)
def top_of(tensors):
    by = {}
    for size, frames in tensors.values():
        if who(frames):
            by[who(frames)] = by.get(who(frames), 0) + size
    return max(by.items(), key=lambda kv: kv[1])
top = top_of(at_peak)
# The live set halfway through the history: every entry of that microsecond applied.
mid_us = trace[len(trace) // 2]["time_us"]
alive = {}
for e in trace:
    if e["time_us"] > mid_us:
        break
    if e["action"] == "alloc":
        alive[e["addr"]] = (e["size"], e["frames"])
    elif e["action"] == "free_completed":
        alive.pop(e["addr"])
at = top_of(alive)
count = lambda *actions: sum(1 for e in trace if e["action"] in actions)
print(json.dumps([{"entries": len(trace), "peak": peak, "tensors": len(at_peak),
    "function": top[0][0], "file": top[0][1], "function_bytes": top[1], "peak_reserved": peak_reserved,
    "at_us": mid_us - trace[0]["time_us"], "at_function": at[0][0], "at_bytes": at[1],
    "segment_allocations": count("segment_alloc"),
    "events": count("segment_alloc", "alloc", "free_completed")}]))
"#;

fn generate(dir: &Path, protocol: u8) -> PathBuf {
    let path = dir.join(format!("large-p{protocol}.pickle"));
    common::python_list(
        GENERATE,
        &[
            &fixture(),
            &path,
            Path::new("50000"),
            Path::new(&protocol.to_string()),
        ],
    );
    path
}

fn json(args: &[&str], path: &Path) -> Value {
    let out = common::vramtrace_ok(&[args, &[path.to_str().unwrap()]].concat());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_large_history_gives_pythons_figures() {
    if common::fixtures().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for protocol in [2, 4] {
        let path = generate(dir.path(), protocol);
        let truth = &common::python_list(&[common::PY_WHO, TRUTH].concat(), &[&path])[0];
        assert!(truth["entries"].as_u64().unwrap() > 70_000, "{truth}");
        let summary = json(&["summary", "--json"], &path);
        let p = &summary["processes"][0];
        let d = &p["devices"][0];
        assert_eq!(d["peak_requested_bytes"], truth["peak"], "p{protocol}");
        assert_eq!(
            d["peak_reserved_bytes"], truth["peak_reserved"],
            "p{protocol}"
        );
        assert_eq!(
            p["allocations"], truth["segment_allocations"],
            "p{protocol}"
        );
        assert_eq!(p["events"], truth["events"], "p{protocol}");
        assert_eq!(p["history_truncated"], false, "p{protocol}");
        let peak = json(&["peak", "--json"], &path);
        let d = &peak["devices"][0];
        assert_eq!(d["live_bytes"], truth["peak"], "p{protocol}");
        assert_eq!(d["live_blocks"], truth["tensors"], "p{protocol}");
        assert_eq!(
            d["top_function"]["function"], truth["function"],
            "p{protocol}"
        );
        assert_eq!(d["top_function"]["file"], truth["file"], "p{protocol}");
        assert_eq!(
            d["top_function"]["bytes"], truth["function_bytes"],
            "p{protocol}"
        );
        csv_rows_match(&path, truth, protocol);
        // Halfway (the history read up to then): the same stacks name the tensors.
        let at = format!("{}us", truth["at_us"]);
        let peak = json(&["peak", "--json", "--at", &at], &path);
        let d = &peak["devices"][0];
        assert_eq!(
            d["top_function"]["function"], truth["at_function"],
            "p{protocol} at {at}"
        );
        assert_eq!(
            d["top_function"]["bytes"], truth["at_bytes"],
            "p{protocol} at {at}"
        );
    }
}

/// The CSV export, whose rows are formatted on a thread of their own in batches: a row for
/// each event Python counts, the segment's bytes as the process's reserved figure.
fn csv_rows_match(path: &Path, truth: &Value, protocol: u8) {
    let out = common::vramtrace_ok(&["export", "--format", "csv", path.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (op, reserved) = (column("op"), column("process_device_bytes"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, truth["events"], "p{protocol}: rows");
    let ops = |name: &str| rows.iter().filter(|r| r[op] == name).count() as u64;
    assert_eq!(ops("alloc"), truth["segment_allocations"], "p{protocol}");
    let most = rows
        .iter()
        .map(|r| r[reserved].parse::<u64>().unwrap())
        .max();
    assert_eq!(most, truth["peak_reserved"].as_u64(), "p{protocol}");
}

#[test]
fn a_csv_export_that_cannot_be_written_fails_with_the_error() {
    if common::fixtures().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = generate(dir.path(), 4);
    // Rows past the first batches: the writing thread fails while the replay goes on.
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(["export", "--format", "csv", path.to_str().unwrap()])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot write the export: No space left on device"),
        "{stderr}"
    );
}

/// A small file whose few entries make millions of events: an expandable segment's
/// `segment_map` and `segment_unmap` over 512 pages of 20 MiB, 2,000 times. Its events
/// are made as the replay goes, not all at once: `summary` stays far under what holding
/// them takes (2 million events, some 200 MB), and says what Python's own reading says.
#[test]
fn few_entries_that_make_millions_of_events_are_not_all_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("churn.pickle");
    let script = r#"
import pickle, sys
P = 20 << 20; A = 0x7f0000000000; S = P * 512
frames = [{"name": "forward", "filename": "model.py", "line": 3}]
t, us = [], 1_700_000_000_000_000
for i in range(2000):
    for a in ("segment_map", "segment_unmap"):
        t.append({"action": a, "addr": A, "size": S, "stream": 0, "time_us": us, "frames": frames}); us += 10
pickle.dump({"segments": [], "device_traces": [t], "allocator_settings": {"expandable_segments": True}},
            open(sys.argv[1], "wb"), protocol=4)
"#;
    common::python3(&["-c", script, path.to_str().unwrap()]);
    let out = common::vramtrace_ok(&["summary", "--json", path.to_str().unwrap()]);
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let most_kb = usage.ru_maxrss;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &v["processes"][0]["devices"][0];
    // Mapped 512 pages at once, then all unmapped: its peak, and nothing at its end.
    assert_eq!(d["peak_reserved_bytes"].as_u64(), Some(512 * (20 << 20)));
    assert_eq!(d["reserved_bytes_at_end"].as_u64(), Some(0));
    // The largest child of this test (Python or vramtrace) stayed under 120 MB.
    assert!(most_kb < 120 * 1024, "{most_kb} KB");
}
