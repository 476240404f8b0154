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
