//! Shared by the analyzer's tests: traces written by hand, and the `vramtrace` binary.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
/// Nanoseconds in a millisecond and a second.
pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;

/// A header line; `rank` goes into `env.RANK`.
pub fn header(
    pid: u32,
    host: &str,
    start_mono_ns: u64,
    start_unix_ns: u64,
    rank: Option<&str>,
) -> String {
    let env = match rank {
        Some(r) => json!({ "RANK": r }),
        None => json!({}),
    };
    json!({
        "format": "vramtrace", "version": 1, "pid": pid, "ppid": 1, "host": host,
        "argv": ["python", "train.py", format!("--rank={}", rank.unwrap_or("-"))],
        "exe": "/usr/bin/python3", "start_unix_ns": start_unix_ns, "start_mono_ns": start_mono_ns,
        "env": env,
        "settings": {"output": "traces/vramtrace-%h-%p.jsonl", "children": true, "flush_ms": 100},
        "interposer": "0.1.0"
    })
    .to_string()
}

pub fn alloc(t: u64, dev: i32, api: &str, addr: u64, size: u64) -> String {
    json!({"t": t, "tid": 7, "dev": dev, "api": api, "res": 0, "addr": addr, "size": size})
        .to_string()
}

pub fn failed(t: u64, dev: i32, api: &str, size: u64) -> String {
    json!({"t": t, "tid": 7, "dev": dev, "api": api, "res": 2, "size": size}).to_string()
}

pub fn free(t: u64, dev: i32, api: &str, addr: u64) -> String {
    json!({"t": t, "tid": 7, "dev": dev, "api": api, "res": 0, "addr": addr}).to_string()
}

pub fn meminfo(t: u64, dev: i32, free: u64, total: u64) -> String {
    json!({"t": t, "tid": 7, "dev": dev, "api": "cudaMemGetInfo", "res": 0, "free": free, "total": total})
        .to_string()
}

pub fn end(t: u64, events: u64) -> String {
    json!({"end": {"t": t, "events": events, "reason": "exit"}}).to_string()
}

/// Writes lines (each gets its newline) to `dir/name`.
pub fn write_trace(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(&path, text).expect("write trace");
    path
}

/// `dir/traces`, made.
pub fn traces_in(dir: &Path) -> PathBuf {
    let traces = dir.join("traces");
    std::fs::create_dir(&traces).expect("make the traces directory");
    traces
}

/// `vramtrace report -o dir/report.html traces`, which must succeed: the page's path
/// and its text.
pub fn report_of(dir: &Path, traces: &Path) -> (PathBuf, String) {
    let html = dir.join("report.html");
    vramtrace_ok(&[
        "report",
        "-o",
        html.to_str().unwrap(),
        traces.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).expect("the report was written");
    (html, page)
}

pub fn vramtrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(args)
        .output()
        .expect("vramtrace runs")
}

/// [`vramtrace`], which must succeed (its stderr in the failure message).
pub fn vramtrace_ok(args: &[&str]) -> Output {
    let out = vramtrace(args);
    assert!(
        out.status.success(),
        "vramtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a view with `--json` and parses its stdout; the exit status is returned too.
pub fn json_view(args: &[&str]) -> (Value, Option<i32>, String) {
    let out = vramtrace(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}); stderr: {stderr}"));
    (v, out.status.code(), stderr)
}

/// Runs `python3 ARGS...`, which must succeed; its stdout.
pub fn python3(args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A device's segments as (address, size, [(block address, size, state)]).
pub type Layout = Vec<(u64, u64, Vec<(u64, u64, &'static str)>)>;

pub fn layout(s: &vramtrace_analyzer::snapshot::Snapshot, device: i64) -> Layout {
    s.device(device)
        .map(|d| {
            d.segments
                .iter()
                .map(|g| {
                    let b = g
                        .blocks
                        .iter()
                        .map(|b| (b.address, b.size, b.state.name()))
                        .collect();
                    (g.address, g.total_size, b)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Strings written to break a tracer's outputs: terminal escapes (clear the screen, red,
/// the window title), C1 CSI, DEL, a right-to-left override, line breaks and `;` that
/// would forge folded stacks, a comment and script opener that swallows the rest of an
/// HTML page, and spreadsheet formulas.
pub const HOSTILE: &str =
    "\x1b[2J\x1b[31m\x1b]0;pwned\x07\u{9b}1m\x7f\u{202e}<!--<script>alert(1)</script>&\"'\n1;fake;stack 99999999\r";

/// A run of two hosts whose every string from the trace is hostile: host, argv, exe,
/// `RANK`, `CUDA_VISIBLE_DEVICES` (the GPU label), the output setting, frames' functions,
/// files and modules, and a marker name. Host `evil` holds 1 GiB from stack A and 2 GiB
/// from stack B at its peak and fails a 64 GiB allocation; host `=HYPERLINK("x")` holds
/// 512 MiB from stack A. Nothing is freed.
pub fn write_hostile_run(dir: &Path) {
    let h = HOSTILE;
    let header_of = |pid: u32, host: &str| {
        json!({
            "format": "vramtrace", "version": 1, "pid": pid, "ppid": 1, "host": host,
            "argv": ["python", format!("train{h}.py"), "--hf-token=hf_SECRETvalue", "--password", "hunter2"],
            "exe": format!("/usr/bin/python{h}"), "start_unix_ns": 1_700_000_000 * S, "start_mono_ns": S,
            "env": {"RANK": format!("0{h}"), "CUDA_VISIBLE_DEVICES": format!("GPU-{h}")},
            "settings": {"output": format!("traces{h}/%h-%p.jsonl"), "children": true, "flush_ms": 100},
            "interposer": "0.1.0"
        })
        .to_string()
    };
    let frame = |ip: u64, name: &str| {
        json!({"frame": {"ip": ip, "module": format!("/lib/{h}.so"), "offset": 16,
            "function": format!("{name}{h}"), "file": format!("{h}.c"), "line": 7}})
        .to_string()
    };
    let node = |id: u64, parent: u64, ip: u64| {
        json!({"node": {"id": id, "parent": parent, "ip": ip}}).to_string()
    };
    let on_stack = |line: String, stack: u64| {
        let mut v: Value = serde_json::from_str(&line).unwrap();
        v["stack"] = json!(stack);
        v.to_string()
    };
    let stacks = [
        frame(0x100, "main"),
        frame(0x200, "alloc_a"),
        frame(0x300, "alloc_b"),
        node(1, 0, 0x100),
        node(2, 1, 0x200),
        node(3, 1, 0x300),
        json!({"name": {"id": 1, "text": format!("step{h}")}}).to_string(),
    ];
    let mut evil = vec![header_of(100, &format!("evil{h}"))];
    evil.extend(stacks.iter().cloned());
    evil.extend([
        on_stack(alloc(10 * MS, 0, "cudaMalloc", 0x1000, GIB), 2),
        json!({"t": 15 * MS, "tid": 7, "dev": 0, "api": "vramtrace_marker", "res": 0, "handle": 1})
            .to_string(),
        on_stack(alloc(20 * MS, 0, "cudaMalloc", 0x2000, 2 * GIB), 3),
        on_stack(failed(30 * MS, 0, "cudaMalloc", 64 * GIB), 3),
        end(40 * MS, 4),
    ]);
    write_trace(dir, "vramtrace-evil-100.jsonl", &evil);
    let mut other = vec![header_of(200, "=HYPERLINK(\"http://x\")")];
    other.extend(stacks.iter().cloned());
    other.extend([
        on_stack(alloc(10 * MS, 0, "cudaMalloc", 0x1000, 512 * MIB), 2),
        end(40 * MS, 1),
    ]);
    write_trace(dir, "vramtrace-other-200.jsonl", &other);
}

/// Raw bytes a terminal acts on: C0 controls but the line feed, DEL, and C1 (U+0080 to
/// U+009F, `C2 80`-`C2 9F` in UTF-8).
pub fn raw_controls(out: &[u8]) -> Vec<(usize, u8)> {
    let mut found = Vec::new();
    for (i, &b) in out.iter().enumerate() {
        let c1 = b == 0xc2 && out.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n));
        if (b < 0x20 && b != b'\n') || b == 0x7f || c1 {
            found.push((i, b));
        }
    }
    found
}

/// A fresh directory with `traces/` in it holding one trace, `name`, of `lines`; the
/// directory lives as long as the returned handle.
pub fn one_trace_dir(name: &str, lines: &[String]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    write_trace(&traces, name, lines);
    (dir, traces)
}

/// Runs a Python script (`python3 -c SCRIPT ARGS...`), which must succeed, and parses the
/// JSON list it prints: the tests' own replays, independent of the analyzer.
pub fn python_list(script: &str, args: &[&Path]) -> Vec<Value> {
    let out = Command::new("python3")
        .args(["-c", script])
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout) {
        Ok(Value::Array(list)) => list,
        other => panic!("not a JSON list: {other:?}"),
    }
}

/// An independent replay of block sizes, as `torch.cuda.max_memory_allocated()` counts:
/// each `alloc` takes the start of the free block running to the next allocated block (or
/// the segment's end) and splits off the rest only when it is worth keeping (small pool:
/// 512 bytes or more; large: more than 1 MiB). It checks itself: every block still alive at
/// the end must come out at the size the final segments give it (`wrong` 0).
/// Python put before a truth script: `who(frames)`, the function a person would name for
/// a stack (the innermost Python frame outside torch, site-packages and the standard
/// library, else the innermost Python frame), as `(name, filename)`, or None.
pub const PY_WHO: &str = r#"
LIB = ("/site-packages/", "/dist-packages/", "/torch/", "/lib/python3", "/lib64/python3")
def python(f):
    n = f["filename"]
    return n.endswith(".py") or (n.startswith("<") and not n.startswith("<frozen"))
def user(f):
    n = f["filename"]
    return python(f) and not n.startswith("<frozen") and not any(l in n for l in LIB)
def who(frames):
    for pick in (user, python):
        for f in frames:
            if pick(f):
                return (f["name"], f["filename"])
    return None
"#;

pub const BLOCK_SIZES: &str = r#"
import json, pickle, sys, bisect
snap = pickle.load(open(sys.argv[1], "rb"))
settings = snap.get("allocator_settings", {}) if isinstance(snap, dict) else {}
MAX_SPLIT = settings.get("max_split_size", -1)
MAX_SPLIT = (1 << 64) if MAX_SPLIT is None or MAX_SPLIT < 0 else MAX_SPLIT
def rounded(n):
    return 512 if n < 512 else (n + 511) // 512 * 512
def block_size(free, r):
    # The caching allocator splits the free block it takes when the rest is worth keeping.
    rest = free - r
    if r <= 1 << 20:
        return r if rest >= 512 else free
    return r if r < MAX_SPLIT and rest > 1 << 20 else free
result = []
for dev, trace in enumerate(snap["device_traces"]):
    if not trace:
        continue
    segs, alive, final = {}, {}, {}
    for s in snap["segments"]:
        if s["device"] != dev:
            continue
        segs[s["address"]] = s["total_size"]
        for b in s["blocks"]:
            if b["state"] != "inactive":
                alive[b["address"]] = (b["requested_size"], b["size"])
                final[b["address"]] = b["size"]
    for e in reversed(trace):
        a = e["action"]
        if a in ("segment_alloc", "segment_map"): del segs[e["addr"]]
        elif a in ("segment_free", "segment_unmap"): segs[e["addr"]] = e["size"]
        elif a == "alloc": del alive[e["addr"]]
        elif a == "free_completed": alive[e["addr"]] = (e["size"], None)
    unknown = sum(1 for r, s in alive.values() if s is None)
    size_of = {a: s for a, (r, s) in alive.items()}
    live = sum(s or 0 for s in size_of.values())
    peak = live
    checked = wrong = 0
    for i, e in enumerate(trace):
        a = e["action"]
        if a in ("segment_alloc", "segment_map"): segs[e["addr"]] = e["size"]
        elif a in ("segment_free", "segment_unmap"): del segs[e["addr"]]
        elif a == "alloc":
            addr = e["addr"]
            seg = max(s for s in segs if s <= addr)
            end = seg + segs[seg]
            nxt = min([b for b in size_of if addr < b < end] + [end])
            s = block_size(nxt - addr, rounded(e["size"]))
            size_of[addr] = s
            live += s
        elif a == "free_completed":
            live -= size_of.pop(e["addr"]) or 0
        peak = max(peak, live)
    for addr, s in size_of.items():
        if addr in final and s is not None:
            checked += 1
            wrong += s != final[addr]
    result.append({"device": dev, "peak_allocated": peak, "unknown_before": unknown,
                   "checked": checked, "wrong": wrong})
print(json.dumps(result))
"#;

/// The real snapshots' directory, or a skip: [`vramtrace_tests::fixtures::dir`].
pub fn fixtures() -> Option<PathBuf> {
    vramtrace_tests::fixtures::dir()
}

/// Python that a test's script starts with: `one_segment_each(tensors)` is the segments and
/// history of a snapshot of `tensors` (`[(size, frames)]`, each held in a segment of its
/// own 64 MiB apart from 2^32, allocated in order), so that no size is rounded.
pub const ONE_SEGMENT_EACH: &str = r#"
import pickle, sys
M = 1 << 20
def one_segment_each(tensors):
    segments, trace = [], []
    for i, (size, frames) in enumerate(tensors):
        addr = (1 << 32) + i * 64 * M
        block = {"address": addr, "size": size, "requested_size": size,
                 "state": "active_allocated", "frames": frames}
        segments.append({"device": 0, "address": addr, "total_size": size,
                         "allocated_size": size, "active_size": size, "requested_size": size,
                         "stream": 0, "segment_type": "large", "blocks": [block]})
        for j, action in enumerate(["segment_alloc", "alloc"]):
            trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                          "time_us": 2 * i + j + 1, "frames": frames})
    return segments, trace
"#;

/// Runs `script` after [`ONE_SEGMENT_EACH`], with `path` as its argument.
pub fn write_snapshot(script: &str, path: &Path) {
    let script = format!("{ONE_SEGMENT_EACH}{script}");
    python3(&["-c", &script, path.to_str().unwrap()]);
}

/// A `Categories` JSON object (docs/json.md, "Tensor categories") as (bytes, tensors) by
/// category name.
pub fn categories(c: &Value) -> std::collections::BTreeMap<String, (u64, u64)> {
    c["split"]
        .as_array()
        .unwrap_or_else(|| panic!("no categories: {c}"))
        .iter()
        .map(|s| {
            let name = s["category"].as_str().unwrap().to_string();
            let n = |k: &str| s[k].as_u64().unwrap();
            (name, (n("bytes"), n("tensors")))
        })
        .collect()
}
