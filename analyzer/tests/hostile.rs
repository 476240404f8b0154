//! Inputs written to break the analyzer: one line or a few KB that made it abort,
//! allocate gigabytes or run for hours. Each runs the CLI under a 2-GiB address-space
//! limit, so memory that grows with something other than the input is an abort here,
//! not a slow machine.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Address space the CLI may take: far above what any of these inputs needs.
const LIMIT_KIB: u64 = 2 << 20;

/// `vramtrace ARGS` under the address-space limit, and stopped after 5 minutes (exit
/// 124): a hang fails the test instead of stalling it.
fn limited(args: &[&str]) -> Output {
    limited_for(300, args)
}

/// `vramtrace ARGS` under the address-space limit, stopped after `secs` seconds.
fn limited_for(secs: u32, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {LIMIT_KIB}; exec timeout {secs} \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_vramtrace"))
        .args(args)
        .output()
        .expect("sh runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exited by itself (no abort, no signal) with `code`.
fn assert_exit(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}: {}", stderr(out));
    assert!(!stderr(out).contains("panicked"), "{what}: {}", stderr(out));
}

fn head() -> String {
    header(41, "node1", 5 * S, 1_700_000_000 * S, None)
}

#[test]
fn a_device_ordinal_of_2_to_the_31_is_an_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(
        dir.path(),
        "dev.jsonl",
        &[
            head(),
            alloc(10, 0, "cudaMalloc", 4096, MIB),
            alloc(20, i32::MAX, "cudaMalloc", 8192, MIB),
        ],
    );
    let out_file = dir.path().join("out.pickle");
    let out = limited(&[
        "export",
        "--format",
        "memory-viz",
        "-o",
        out_file.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    // The trace is incomplete (exit 1); what came before the bad line is exported.
    assert_exit(&out, 1, "memory-viz export");
    let e = stderr(&out);
    assert!(e.contains(&format!("{}:3:", trace.display())), "{e}");
    assert!(e.contains("device ordinal 2147483647 out of range"), "{e}");
    assert!(std::fs::metadata(&out_file).unwrap().len() < 1 << 20);
}

#[test]
fn an_event_at_2_to_the_62_ns_gives_a_timeline_and_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let late = 1u64 << 62;
    let trace = write_trace(
        dir.path(),
        "late.jsonl",
        &[
            head(),
            alloc(10, 0, "cudaMalloc", 4096, MIB),
            // A failed call changes no memory: only the run's end moves out to it.
            failed(late, 0, "cudaMalloc", GIB),
        ],
    );
    let t = trace.to_str().unwrap();
    let out = limited(&["timeline", "--json", t]);
    assert_exit(&out, 0, "timeline");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let series = &v["series"][0];
    let points = series["points"].as_array().unwrap();
    assert!(points.len() <= 2000, "{} points", points.len());
    let last = &points[points.len() - 1];
    // The buckets reach the run's end, the megabyte still held there.
    assert!(last["time_ns"].as_u64().unwrap() <= late);
    assert!(last["time_ns"].as_u64().unwrap() + v["resolution_ns"].as_u64().unwrap() > late);
    assert_eq!(last["live_bytes"], MIB);
    let html = dir.path().join("r.html");
    let out = limited(&["report", "-o", html.to_str().unwrap(), t]);
    assert_exit(&out, 0, "report");
}

#[test]
fn an_escaped_api_name_is_read_as_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let escaped =
        r#"{"t":10,"tid":7,"dev":0,"api":"cuda\u004dalloc","res":0,"addr":4096,"size":1048576}"#;
    let trace = write_trace(
        dir.path(),
        "escaped.jsonl",
        &[head(), escaped.to_string(), end(20, 1)],
    );
    let (v, code, e) = json_view(&["summary", "--json", trace.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{e}");
    let p = &v["processes"][0];
    assert_eq!(p["allocations"], 1, "{v}");
    assert_eq!(p["devices"][0]["peak_reserved_bytes"], MIB, "{v}");
}

/// A pickle of protocol 2: `body`, then STOP.
fn pickle(body: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 2];
    p.extend_from_slice(body);
    p.push(b'.');
    p
}

fn snapshot_view(dir: &Path, name: &str, bytes: &[u8]) -> Output {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    limited(&["snapshot", path.to_str().unwrap()])
}

/// What `vramtrace snapshot` says on stderr of a file `name` of `bytes` it refuses
/// (exit 2, no panic).
fn refused_snapshot(name: &str, bytes: &[u8], what: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = snapshot_view(dir.path(), name, bytes);
    assert_exit(&out, 2, what);
    stderr(&out)
}

#[test]
fn a_small_zstd_file_of_empty_lists_is_refused_before_it_fills_memory() {
    // 64 MiB of EMPTY_LIST in a few kilobytes: each byte a 56-byte list and a 16-byte
    // stack item, 4.5 GiB if nothing stopped it (over the limit: an abort).
    let bytes = pickle(&vec![b']'; 64 << 20]);
    let small = zstd::encode_all(&bytes[..], 3).unwrap();
    assert!(small.len() < 100_000, "{} bytes", small.len());
    let e = refused_snapshot("lists.pickle.zst", &small, "empty lists");
    assert!(e.contains("lists.pickle.zst: byte "), "{e}");
    assert!(
        e.contains("more than 24 times") && e.contains("refused before it exhausts memory"),
        "{e}"
    );
}

#[test]
fn one_long_text_line_under_an_address_space_limit_is_refused_before_it_is_copied() {
    // A protocol 0 UNICODE argument of 256 MiB of 0xff in a few kilobytes: its copies
    // as text would pass the 2-GiB limit (an abort); the budget counts what is left under
    // the limit.
    let mut body = vec![b'V'];
    body.extend(std::iter::repeat_n(0xff, 256 << 20));
    body.push(b'\n');
    let small = zstd::encode_all(&pickle(&body)[..], 3).unwrap();
    let e = refused_snapshot("line.pickle.zst", &small, "one long line");
    assert!(
        e.contains("line.pickle.zst: byte 2: the objects decoded so far would take"),
        "{e}"
    );
    assert!(e.contains("refused before it exhausts memory"), "{e}");
}

#[test]
fn a_memo_index_growing_a_mebibyte_a_step_costs_nothing() {
    // None, then 4,000 LONG_BINPUTs, each to an index 2^20 past the last: 20 KB.
    let mut body = vec![b'N'];
    for i in 1..=4000u32 {
        body.push(b'r');
        body.extend_from_slice(&(i << 20).to_le_bytes());
    }
    let e = refused_snapshot("memo.pickle", &pickle(&body), "memo");
    // Read to its end: its root, None, is no snapshot.
    assert!(
        e.contains("memo.pickle: not a PyTorch memory snapshot"),
        "{e}"
    );
}

/// Protocol 2 opcodes for the billion laughs: a short text.
fn text(s: &str) -> Vec<u8> {
    let mut b = vec![b'X'];
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
    b
}

/// A small integer, and a reference to memo entry `memo`.
fn int(v: u8) -> Vec<u8> {
    vec![b'K', v]
}
fn memo(i: u8) -> Vec<u8> {
    vec![b'h', i]
}

/// A dict of `pairs`, left on the stack.
fn value_dict(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut b = b"}(".to_vec();
    for (k, v) in pairs {
        b.extend(text(k));
        b.extend_from_slice(v);
    }
    b.push(b'u');
    b
}

/// A dict of `pairs`, stored in memo entry `store` and popped.
fn dict(pairs: &[(&str, Vec<u8>)], store: u8) -> Vec<u8> {
    let mut b = value_dict(pairs);
    b.extend_from_slice(&[b'q', store, b'0']);
    b
}

/// A list of `items`, left on the stack.
fn list(items: &[Vec<u8>]) -> Vec<u8> {
    let mut b = b"](".to_vec();
    items.iter().for_each(|i| b.extend_from_slice(i));
    b.push(b'e');
    b
}

/// Any integer of up to 64 bits (LONG1, 9 bytes).
fn long(v: i64) -> Vec<u8> {
    let mut b = vec![0x8a, 9];
    b.extend_from_slice(&v.to_le_bytes());
    b.push(if v < 0 { 0xff } else { 0 });
    b
}

/// A list of `n` references to memo entry `memo`, stored in memo entry `store`.
fn shared_list(memo: u8, n: usize, store: u8) -> Vec<u8> {
    let mut b = vec![b']', b'('];
    for _ in 0..n {
        b.extend_from_slice(&[b'h', memo]);
    }
    b.extend_from_slice(&[b'e', b'q', store]);
    b
}

#[test]
fn one_list_shared_a_billion_times_over_is_refused() {
    // A frame; 1,000 references to it; a block holding that list; 1,000 references to
    // the block; a segment holding those; 1,000 references to the segment: 10^9 frames
    // in 6 KB.
    let mut body = dict(
        &[
            ("filename", text("a.py")),
            ("line", int(1)),
            ("name", text("f")),
        ],
        0,
    );
    body.extend(shared_list(0, 1000, 1));
    body.push(b'0');
    body.extend(dict(
        &[
            ("size", int(1)),
            ("state", text("active_allocated")),
            ("frames", memo(1)),
        ],
        2,
    ));
    body.extend(shared_list(2, 1000, 3));
    body.push(b'0');
    body.extend(dict(
        &[
            ("address", int(0)),
            ("total_size", int(1)),
            ("blocks", memo(3)),
            ("frames", memo(1)),
        ],
        4,
    ));
    body.extend(shared_list(4, 1000, 5));
    let bytes = pickle(&body);
    assert!(bytes.len() < 7000, "{} bytes", bytes.len());
    let e = refused_snapshot("laughs.pickle", &bytes, "billion laughs");
    assert!(
        e.contains("laughs.pickle: not a PyTorch memory snapshot"),
        "{e}"
    );
    assert!(e.contains("shared by reference"), "{e}");
}

/// A snapshot whose `device_traces` is one list of `entries` references to one entry,
/// shared by `devices` devices.
fn shared_history(entries: usize, devices: usize) -> Vec<u8> {
    let mut body = dict(
        &[
            ("action", text("alloc")),
            ("addr", int(0)),
            ("size", int(1)),
            ("time_us", int(1)),
        ],
        0,
    );
    body.extend(shared_list(0, entries, 1));
    body.push(b'0');
    body.extend(value_dict(&[
        ("segments", b"]".to_vec()),
        ("device_traces", shared_list(1, devices, 2)),
    ]));
    pickle(&body)
}

#[test]
fn one_history_shared_by_thousands_of_devices_is_refused_by_the_views() {
    // An entry; 1,000 references to it; 3,000 references to that list as
    // `device_traces`: 3 million entries in 8 KB, which the views would replay one by
    // one (they stream the history, apart from the model's count).
    let bytes = shared_history(1000, 3000);
    assert!(bytes.len() < 9000, "{} bytes", bytes.len());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("laughs.pickle");
    std::fs::write(&path, &bytes).unwrap();
    let out = limited(&["summary", "--json", path.to_str().unwrap()]);
    assert_exit(&out, 1, "shared history");
    let e = stderr(&out);
    assert!(
        e.contains("laughs.pickle: not a PyTorch memory snapshot"),
        "{e}"
    );
    assert!(e.contains("shared by reference"), "{e}");
}

#[test]
fn four_thousand_devices_cost_no_scan_of_them_per_event() {
    // One list of 256 entries shared by 4,095 devices: a million entries, inside the
    // expansion budget of its 9 KB. Merging the devices by a scan of them all per event
    // took minutes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("devices.pickle");
    std::fs::write(&path, shared_history(256, 4095)).unwrap();
    let out = limited(&["summary", "--json", path.to_str().unwrap()]);
    assert_exit(&out, 0, "4,095 devices");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["processes"][0]["events"], 4095 * 256);
}

#[test]
fn a_history_time_of_2_to_the_62_microseconds_is_no_overflow() {
    // Two entries 2^62 us apart, then one as far before the epoch: ns of them overflow.
    for (name, late) in [("late", 1i64 << 62), ("early", -(1i64 << 62))] {
        let entry = |t: i64| {
            value_dict(&[
                ("action", text("alloc")),
                ("addr", int(0)),
                ("size", int(1)),
                ("time_us", long(t)),
            ])
        };
        let history = list(&[entry(0), entry(late)]);
        let body = value_dict(&[
            ("segments", b"]".to_vec()),
            ("device_traces", list(&[history])),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.pickle"));
        std::fs::write(&path, pickle(&body)).unwrap();
        let out = limited(&["summary", "--json", path.to_str().unwrap()]);
        assert_exit(&out, 0, name);
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["duration_ns"], 1u64 << 62, "{name}");
    }
}

#[test]
fn tensors_whose_bytes_add_up_past_2_to_the_64_are_no_overflow() {
    // Two live tensors of 2^63 bytes each, and a third: every sum of live bytes overflows.
    let entry = |addr: u64| {
        value_dict(&[
            ("action", text("alloc")),
            ("addr", long(addr as i64)),
            ("size", long(1i64 << 62)),
        ])
    };
    let history = list(&[
        entry(1 << 40),
        entry(1 << 41),
        entry(1 << 42),
        entry(1 << 43),
        entry(1 << 44),
    ]);
    let body = value_dict(&[
        ("segments", b"]".to_vec()),
        ("device_traces", list(&[history])),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.pickle");
    std::fs::write(&path, pickle(&body)).unwrap();
    let p = path.to_str().unwrap();
    let report = dir.path().join("r.html");
    let svg = dir.path().join("f.svg");
    for args in [
        vec!["summary", "--json", p],
        vec!["peak", p],
        vec!["leaks", p],
        vec!["oom", p],
        vec!["timeline", "--json", p],
        vec!["flamegraph", "-o", svg.to_str().unwrap(), p],
        vec!["report", "-o", report.to_str().unwrap(), p],
    ] {
        let out = limited(&args);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!said.contains("panicked"), "{args:?}: {said}");
        assert!(matches!(out.status.code(), Some(0..=2)), "{args:?}: {said}");
    }
}

#[test]
fn many_failures_with_many_live_groups_keep_a_bounded_share_of_each() {
    // 15,000 allocations from as many call stacks, then 15,000 failed ones: copying every
    // live group into every failure took 15,000^2 group copies.
    const N: u64 = 15_000;
    let mut lines = vec![head()];
    for i in 0..N {
        let size = MIB + i;
        lines.push(format!(
            r#"{{"t":{},"tid":7,"dev":0,"api":"cudaMalloc","res":0,"addr":{},"size":{size},"stack":{}}}"#,
            10 + i,
            (1 << 40) + i * (4 * MIB),
            i + 1
        ));
    }
    for i in 0..N {
        lines.push(failed(N + 10 + i, 0, "cudaMalloc", 100 * GIB));
    }
    lines.push(end(3 * N, 2 * N));
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "fails.jsonl", &lines);
    let out = limited(&["oom", "--json", trace.to_str().unwrap()]);
    assert_exit(&out, 0, "oom");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1000);
    let first = &failures[0];
    assert_eq!(first["live_blocks"], N);
    assert_eq!(first["live_group_count"], N);
    assert_eq!(first["live_bytes"], N * MIB + N * (N - 1) / 2);
    let groups = first["live_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 100);
    // The largest: the last allocation's size, and down from it.
    assert_eq!(groups[0]["bytes"], MIB + N - 1);
    assert_eq!(groups[99]["bytes"], MIB + N - 100);
    let e = stderr(&out);
    assert!(
        e.contains("14000 more failed allocations after the first 1000"),
        "{e}"
    );
    let (summary, _, _) = json_view(&["summary", "--json", trace.to_str().unwrap()]);
    assert_eq!(summary["processes"][0]["failed_allocations"], N);
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A snapshot's name on a FIFO (which blocks a reader forever) and on a symlink to
/// `/dev/zero` (which never ends): each is named and left out; the views finish.
#[test]
fn a_fifo_or_a_device_named_like_a_snapshot_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(
        dir.path(),
        "t.jsonl",
        &[head(), alloc(10, 0, "cudaMalloc", 4096, MIB), end(20, 1)],
    );
    let snapshot = dir.path().join("torch-snapshot-41.pickle");
    let d = dir.path().to_str().unwrap();
    let html = dir.path().join("r.html");
    for what in ["FIFO", "device"] {
        let _ = std::fs::remove_file(&snapshot);
        if what == "FIFO" {
            mkfifo(&snapshot);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &snapshot).unwrap();
        }
        for args in [
            vec!["timeline", d],
            vec!["report", "--force", "-o", html.to_str().unwrap(), d],
        ] {
            let out = limited(&args);
            assert_exit(&out, 0, &format!("{args:?} beside a {what}"));
            let e = stderr(&out);
            assert!(
                e.contains(&format!(
                    "{}: not a regular file (a {what})",
                    snapshot.display()
                )),
                "{e}"
            );
        }
        let out = limited(&["snapshot", snapshot.to_str().unwrap()]);
        assert_exit(&out, 2, what);
    }
}

/// A FIFO with a trace's name, in a directory or on the command line: an error naming
/// it, and the other traces are read.
#[test]
fn a_fifo_named_like_a_trace_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_trace(
        dir.path(),
        "a.jsonl",
        &[head(), alloc(10, 0, "cudaMalloc", 4096, MIB), end(20, 1)],
    );
    let fifo = dir.path().join("b.jsonl");
    mkfifo(&fifo);
    for args in [
        vec!["summary", "--json", dir.path().to_str().unwrap()],
        vec![
            "summary",
            "--json",
            good.to_str().unwrap(),
            fifo.to_str().unwrap(),
        ],
    ] {
        let out = limited(&args);
        assert_exit(&out, 1, "summary");
        let e = stderr(&out);
        assert!(
            e.contains(&format!("{}: not a regular file (a FIFO)", fifo.display())),
            "{e}"
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["processes"][0]["allocations"], 1);
    }
}

#[test]
fn a_symlink_loop_is_reported_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let out = limited(&["summary", a.to_str().unwrap()]);
    assert_exit(&out, 2, "loop");
    let e = stderr(&out);
    assert!(
        e.contains(&format!(
            "{}: Too many levels of symbolic links",
            a.display()
        )),
        "{e}"
    );
}

/// `peak --at` past the run's last event shows the state at the end, and says so.
#[test]
fn a_moment_past_the_end_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(
        dir.path(),
        "short.jsonl",
        &[
            head(),
            alloc(MS, 0, "cudaMalloc", 4096, MIB),
            alloc(3 * MS, 0, "cudaMalloc", 8192, MIB),
            end(4 * MS, 2),
        ],
    );
    let t = trace.to_str().unwrap();
    let out = limited(&["peak", "--at", "99", t]);
    assert_exit(&out, 0, "peak --at 99");
    assert!(
        stderr(&out).contains(
            "warning: --at 99.000s is past the run's end (0.003s): showing the state at its end"
        ),
        "{}",
        stderr(&out)
    );
    // Within the run: no warning.
    let out = limited(&["peak", "--at", "2ms", t]);
    assert_exit(&out, 0, "peak --at 2ms");
    assert!(
        !stderr(&out).contains("past the run's end"),
        "{}",
        stderr(&out)
    );
}

/// A snapshot whose figures cannot be: a block larger than its segment, two segments
/// whose sizes add up past 2^64 bytes, trace times that run backwards. Shown as the file
/// says, capped, with a warning for each, never a panic.
#[test]
fn impossible_snapshot_figures_are_warned_about() {
    let block = value_dict(&[
        ("address", int(0)),
        ("size", int(200)),
        ("requested_size", int(200)),
        ("state", text("active_allocated")),
    ]);
    let segment = |address: i64, size: i64, blocks: Vec<Vec<u8>>| {
        value_dict(&[
            ("device", int(0)),
            ("address", long(address)),
            ("total_size", long(size)),
            ("segment_type", text("large")),
            ("blocks", list(&blocks)),
        ])
    };
    let entry = |action: &str, time_us: i64| {
        value_dict(&[
            ("action", text(action)),
            ("addr", int(0)),
            ("size", int(1)),
            ("time_us", long(time_us)),
        ])
    };
    let root = value_dict(&[
        ("segments", list(&[segment(0, 100, vec![block])])),
        (
            "device_traces",
            list(&[list(&[
                entry("alloc", 5_000),
                entry("free_completed", 4_000),
            ])]),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let out = snapshot_view(dir.path(), "bad.pickle", &pickle(&root));
    assert_exit(&out, 0, "impossible figures");
    let e = stderr(&out);
    let path = dir.path().join("bad.pickle");
    let warns = format!("warning: {}: device 0: ", path.display());
    assert!(
        e.contains(&format!(
            "{warns}allocated (200 bytes) is above reserved (100 bytes)"
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "{warns}trace entry 1 is 1000 us earlier than entry 0"
        )),
        "{e}"
    );

    let huge = value_dict(&[(
        "segments",
        list(&[
            segment(0, i64::MAX, vec![]),
            segment(1 << 40, i64::MAX, vec![]),
            segment(1 << 41, i64::MAX, vec![]),
        ]),
    )]);
    let out = snapshot_view(dir.path(), "huge.pickle", &pickle(&huge));
    assert_exit(&out, 0, "sums past 2^64");
    assert!(stderr(&out).contains("past 2^64 bytes"), "{}", stderr(&out));
}

/// The largest free block costs a pass over the live blocks to take. Taken at the first
/// change of every bucket, 100,000 live blocks over thousands of buckets took 77 s of CPU
/// for a 15-MB trace; now the passes stay within 16 blocks per event replayed. Here each
/// free makes the largest free block grow by 512 bytes, so every sample is a new value:
/// the series shows how many were taken, and its end is exact.
#[test]
fn the_largest_free_block_costs_a_bounded_share_of_the_replay() {
    const LIVE: u64 = 50_000;
    const FREES: u64 = 4_000;
    let base = 1u64 << 40;
    let block = |t: u64, api: &str, i: u64| {
        format!(
            r#"{{"t":{t},"tid":7,"dev":0,"api":"{api}","res":0,"addr":{},"size":512,"requested":512}}"#,
            base + 512 * i
        )
    };
    let mut lines = vec![head(), alloc(0, 0, "cudaMalloc", base, GIB)];
    for i in 0..LIVE {
        lines.push(block(1 + i, "vramtrace_block_alloc", i));
    }
    // The last block first, every 10 ms: the free tail of the segment grows.
    for k in 0..FREES {
        lines.push(block(S + k * 10 * MS, "vramtrace_block_free", LIVE - 1 - k));
    }
    lines.push(end(S + FREES * 10 * MS, 1 + LIVE + FREES));
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "blocks.jsonl", &lines);
    let out = limited(&["timeline", "--json", trace.to_str().unwrap()]);
    assert_exit(&out, 0, "timeline");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let largest = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["layer"] == "largest_free_block")
        .expect("a largest_free_block series");
    let mut values: Vec<u64> = largest["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["live_bytes"].as_u64().unwrap())
        .collect();
    // At the end: the tail after the blocks still live.
    let end_value = GIB - 512 * (LIVE - FREES);
    assert_eq!(values.last(), Some(&end_value));
    values.dedup();
    // 1 Mi visits free, then 16 per event over 54,000 events: 1.9M blocks visited in all,
    // most of them by the samples taken while the blocks were allocated. Every bucket's
    // first change would be 400 values.
    assert!(values.len() <= 60, "{} samples", values.len());
    assert!(values.len() >= 3, "{} samples", values.len());
}

/// A history entry of 2^64 - 1 bytes (and one of 2^63) inside a real-looking snapshot
/// (written by Python's own `pickle`): every view and whatif finish by themselves, with
/// no panic, whatever they make of it.
#[test]
fn a_request_of_2_to_the_64_less_1_in_a_history_ends_no_view() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.pickle");
    let script = r#"
import pickle, sys
M = 1 << 20
seg = {"device": 0, "address": 1 << 32, "total_size": 20 * M, "allocated_size": 0,
       "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
       "blocks": [{"address": 1 << 32, "size": 20 * M, "requested_size": 0,
                   "state": "inactive", "frames": []}]}
trace = [
    {"action": "alloc", "addr": 1 << 32, "size": (1 << 64) - 1, "stream": 0, "time_us": 1, "frames": []},
    {"action": "alloc", "addr": (1 << 32) + M, "size": 1 << 63, "stream": 0, "time_us": 2, "frames": []},
    {"action": "free_requested", "addr": 1 << 32, "size": (1 << 64) - 1, "stream": 0, "time_us": 3, "frames": []},
    {"action": "free_completed", "addr": 1 << 32, "size": (1 << 64) - 1, "stream": 0, "time_us": 4, "frames": []},
]
pickle.dump({"segments": [seg], "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#;
    let made = Command::new("python3")
        .args(["-c", script, path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let file = path.to_str().unwrap();
    for view in [
        &["summary", "--json"][..],
        &["peak"],
        &["oom"],
        &["timeline", "--json"],
        &["whatif", "--json", "--no-search"],
        &["whatif", "--set", "expandable_segments:True", "--no-search"],
    ] {
        let out = limited_for(60, &[view, &[file]].concat());
        let code = out.status.code();
        assert!(
            matches!(code, Some(0..=2)),
            "{view:?}: {code:?} {}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("panicked"),
            "{view:?}: {}",
            stderr(&out)
        );
    }
}
