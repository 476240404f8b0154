//! Bad input made by hand: the files people might hand the reader by mistake or malice
//! (a newer format, junk, foreign JSON, a bad line mid-trace, a two-gigabyte line, a cut
//! last line, late events, a stack chain deeper than any stack). Never a panic: events, an
//! error that names the file and the line, or a counted skip.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use support::reading::{assert_names_place, read_all, read_file, recorded, summary};
use support::Rng;
use vramtrace_schema::reader::{TraceReader, MAX_LINE};

fn header_line(version: u64) -> String {
    let real = String::from_utf8(recorded().to_vec()).unwrap();
    let mut header: serde_json::Value = serde_json::from_str(real.lines().next().unwrap()).unwrap();
    header["version"] = version.into();
    format!("{header}\n")
}

const EVENT: &str =
    "{\"t\":10,\"tid\":1,\"dev\":0,\"api\":\"cudaMalloc\",\"res\":0,\"addr\":4096,\"size\":512}\n";

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn a_newer_format_version_is_refused_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("{}{EVENT}", header_line(2));
    let path = write(dir.path(), "v2.jsonl", body.as_bytes());
    let e = read_file(&path).error.expect("an error");
    assert_names_place(&e, &path, body.as_bytes());
    assert_eq!(e.line, 1);
    assert!(e.message.contains("version 2"), "{e}");
    assert!(e.message.contains("newer vramtrace"), "{e}");
    // Version 1 with the same content reads.
    let ok = write(
        dir.path(),
        "v1.jsonl",
        format!("{}{EVENT}", header_line(1)).as_bytes(),
    );
    assert_eq!(read_file(&ok).events, 1);
    let (code, stderr) = summary(&[&ok, &path]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:1:", path.display())),
        "{stderr}"
    );
}

/// Unknown APIs and unknown records (a newer interposer's additions) are skipped and
/// counted; the known events around them are kept.
#[test]
fn unknown_event_kinds_and_records_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "{}{EVENT}{}{}{}{EVENT}",
        header_line(1),
        "{\"t\":11,\"tid\":1,\"dev\":0,\"api\":\"cuMemAllocQuantum\",\"res\":0,\"addr\":1,\"size\":2}\n",
        "{\"snapshot\":{\"t\":12,\"bytes\":3}}\n",
        "{\"t\":13,\"api\":\"cudaFree\",\"res\":0,\"addr\":4096,\"future_key\":[1,2,{\"x\":null}]}\n",
    );
    let path = write(dir.path(), "newer.jsonl", body.as_bytes());
    let r = read_file(&path);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.events, 3);
    assert_eq!(r.notes.unknown_apis, 1);
    assert_eq!(r.notes.unknown_records, 1);
    let (code, stderr) = summary(&[&path]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("skipped 1 events of unknown APIs and 1 unknown records"),
        "{stderr}"
    );
}

/// Files that are not traces at all: each an error at line 1 (reader and summary).
#[test]
fn empty_files_junk_and_foreign_json_are_errors_at_line_1() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.jsonl",
        format!("{}{EVENT}", header_line(1)).as_bytes(),
    );
    let mut junk = Vec::new();
    let mut rng = Rng(42);
    junk.extend((0..4096).map(|_| rng.next() as u8));
    let deep = format!("{}\n", "[".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("newline only", b"\n".to_vec()),
        ("binary junk", junk),
        ("NUL bytes", vec![0; 1000]),
        (
            "foreign JSON",
            b"{\"format\":\"chrome-trace\",\"version\":1}\n".to_vec(),
        ),
        ("JSON array", b"[1,2,3]\n".to_vec()),
        ("no version", b"{\"format\":\"vramtrace\"}\n".to_vec()),
        ("deep nesting", deep.into_bytes()),
        (
            "UTF-16",
            "\u{feff}{\"format\":\"vramtrace\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
    ];
    for (what, bytes) in cases {
        let path = write(
            dir.path(),
            &format!("{}.jsonl", what.replace(' ', "-")),
            &bytes,
        );
        let e = read_file(&path)
            .error
            .unwrap_or_else(|| panic!("{what}: no error"));
        assert_names_place(&e, &path, &bytes);
        assert_eq!(e.line, 1, "{what}: {e}");
        let (code, stderr) = summary(&[&good, &path]);
        assert_eq!(code, Some(1), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("{}:1:", path.display())),
            "{what}: {stderr}"
        );
        // Alone: nothing readable; still an error naming the place, never a panic.
        let (code, stderr) = summary(&[&path]);
        assert_ne!(code, Some(0), "{what}");
        assert!(
            stderr.contains(&format!("{}:1:", path.display())),
            "{what}: {stderr}"
        );
    }
}

/// Bad lines after a good start: the error names the line; the events before it count.
#[test]
fn a_bad_line_mid_trace_names_its_line_and_keeps_what_came_before() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, String)> = vec![
        ("not JSON", "not json at all\n".into()),
        (
            "event without time",
            "{\"api\":\"cudaMalloc\",\"res\":0}\n".into(),
        ),
        (
            "time too large",
            "{\"t\":18446744073709551616,\"api\":\"cudaMalloc\"}\n".into(),
        ),
        (
            "negative time",
            "{\"t\":-1,\"api\":\"cudaMalloc\"}\n".into(),
        ),
        (
            "wrong type",
            "{\"t\":\"soon\",\"api\":\"cudaMalloc\"}\n".into(),
        ),
        (
            "line over 1 MiB",
            format!(
                "{{\"t\":1,\"api\":\"cudaMalloc\",\"pad\":\"{}\"}}\n",
                "x".repeat(MAX_LINE)
            ),
        ),
    ];
    for (what, bad) in cases {
        let body = format!("{}{EVENT}{EVENT}{bad}{EVENT}", header_line(1));
        let path = write(dir.path(), "bad.jsonl", body.as_bytes());
        let r = read_file(&path);
        let e = r.error.unwrap_or_else(|| panic!("{what}: no error"));
        assert_eq!(e.line, 4, "{what}: {e}");
        assert_names_place(&e, &path, body.as_bytes());
        assert_eq!(r.events, 2, "{what}: the events before the bad line");
        let (code, stderr) = summary(&[&path]);
        assert_eq!(code, Some(1), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("{}:4:", path.display())),
            "{what}: {stderr}"
        );
    }
}

/// A reader over a generated stream: a header, one event, then a 2-GB line that never
/// ends. The reader must refuse it after reading about MAX_LINE bytes of it, not 2 GB,
/// and without holding more than that in memory.
#[test]
fn a_two_gigabyte_line_is_refused_after_one_mebibyte() {
    struct Endless {
        prefix: Vec<u8>,
        at: usize,
        total: u64,
        served: u64,
    }
    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.at < self.prefix.len() {
                let n = buf.len().min(self.prefix.len() - self.at);
                buf[..n].copy_from_slice(&self.prefix[self.at..self.at + n]);
                self.at += n;
                self.served += n as u64;
                return Ok(n);
            }
            let n = (buf.len() as u64).min(self.total - self.served) as usize;
            buf[..n].fill(b'a');
            self.served += n as u64;
            Ok(n)
        }
    }
    let prefix = format!("{}{EVENT}", header_line(1)).into_bytes();
    let mut stream = Endless {
        at: 0,
        total: prefix.len() as u64 + (2u64 << 30),
        prefix,
        served: 0,
    };
    let path = Path::new("generated-2GB.jsonl");
    let r = read_all(path, &mut stream);
    let e = r.error.expect("an error");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("longer than"), "{e}");
    assert_eq!(r.events, 1);
    assert!(
        stream.served < (MAX_LINE as u64) * 2 + stream.prefix.len() as u64,
        "read {} bytes of a 2-GB line to refuse it",
        stream.served
    );
    // The same 2-GB line as the header line.
    let mut stream = Endless {
        at: 0,
        total: 2u64 << 30,
        prefix: Vec::new(),
        served: 0,
    };
    let e = read_all(path, &mut stream).error.expect("an error");
    assert_eq!(e.line, 1, "{e}");
    assert!(
        stream.served < MAX_LINE as u64 * 2,
        "read {} bytes",
        stream.served
    );
}

/// A trace cut in the middle of its last line (a kill mid-write): the partial line is
/// dropped and noted, not an error.
#[test]
fn a_cut_last_line_is_noted_not_an_error() {
    let original = recorded();
    let dir = tempfile::tempdir().unwrap();
    let whole = read_file(&write(dir.path(), "whole.jsonl", original));
    assert!(whole.error.is_none() && whole.notes.truncated_line.is_none());
    let last_event = original[..original.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap();
    let cut = &original[..last_event + 10];
    let path = write(dir.path(), "cut.jsonl", cut);
    let r = read_file(&path);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(
        r.notes.truncated_line,
        Some(cut.split(|&b| b == b'\n').count() as u64)
    );
    assert!(r.notes.end.is_none(), "the cut line was the end record");
    assert_eq!(r.events, whole.events);
}

/// Every event of a trace late by half the reorder window: 32,768 events far in the
/// future, then 500,000 in order before them. Each of those lands in the middle of the
/// events held back, which a sorted list paid for by moving 32,768 of them (75 s of CPU
/// for 26 MB); a heap pays a logarithm. The deadline is a hang guard, far above the
/// second linear reading takes.
#[test]
fn events_late_by_half_the_reorder_window_are_read_in_linear_time() {
    use vramtrace_schema::reader::REORDER_WINDOW;
    let late = REORDER_WINDOW as u64 / 2;
    let on_time = 500_000u64;
    let event = |t: u64| {
        format!("{{\"t\":{t},\"tid\":1,\"dev\":0,\"api\":\"cudaMemGetInfo\",\"res\":0,\"free\":1,\"total\":2}}\n")
    };
    let mut body = header_line(1);
    for i in 0..late {
        body.push_str(&event(1 << 50 | i));
    }
    for i in 0..on_time {
        body.push_str(&event(i));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "late.jsonl", body.as_bytes());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = TraceReader::open(&path).unwrap();
        let mut times = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            times.push(e.t);
        }
        let _ = tx.send(times);
    });
    let times = rx
        .recv_timeout(std::time::Duration::from_secs(90))
        .expect("reading 532,768 events took more than 90 s");
    // All of them, in time order: the ones on time first.
    assert_eq!(times.len() as u64, late + on_time);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(times[on_time as usize - 1], on_time - 1);
}

/// An event later in the file than the reorder window reaches cannot be put back in
/// order: it is handed out at its own time, after events timed after it, and counted - by
/// the reader, and in the note every view prints - never dropped.
#[test]
fn an_event_later_than_the_reorder_window_is_counted_and_kept() {
    use vramtrace_schema::reader::{MIN_WINDOW, REORDER_WINDOW};
    let event = |t: u64| {
        format!("{{\"t\":{t},\"tid\":1,\"dev\":0,\"api\":\"cudaMemGetInfo\",\"res\":0,\"free\":1,\"total\":2}}\n")
    };
    let body = |ahead: usize| {
        let mut body = header_line(1);
        for i in 0..ahead as u64 + 10 {
            body.push_str(&event(1000 + i));
        }
        body.push_str(&event(5));
        body
    };
    let dir = tempfile::tempdir().unwrap();
    // A reader given the smallest window, and one with the whole window just within it.
    let path = write(dir.path(), "late.jsonl", body(MIN_WINDOW).as_bytes());
    let mut reader = TraceReader::open(&path).unwrap();
    reader.set_window(MIN_WINDOW);
    let mut times = Vec::new();
    while let Some(e) = reader.next_event().unwrap() {
        times.push(e.t);
    }
    assert_eq!(times.len(), MIN_WINDOW + 11, "every event is handed out");
    assert!(times.contains(&5));
    assert_eq!(reader.notes.late_events, 1);
    let mut reader = TraceReader::open(&path).unwrap();
    while reader.next_event().unwrap().is_some() {}
    assert_eq!(reader.notes.late_events, 0, "within the default window");
    // Past the default window, the views say so.
    let path = write(dir.path(), "later.jsonl", body(REORDER_WINDOW).as_bytes());
    let (_, stderr) = summary(&[&path]);
    assert!(
        stderr.contains("1 of its events came later in the file than its reorder window reaches"),
        "{stderr}"
    );
}

/// A chain of 5,000 stack nodes (680 KB with its events) made every view that prints a
/// stack print 5,000 frames per group. No interposer writes a stack deeper than
/// MAX_STACK_DEPTH: the node past it is an error naming its line, the events before it
/// are used.
#[test]
fn a_stack_chain_deeper_than_any_stack_is_an_error_at_its_line() {
    use vramtrace_schema::stacks::MAX_STACK_DEPTH;
    let mut body = format!("{}{EVENT}", header_line(1));
    for id in 1..=5000u64 {
        body.push_str(&format!(
            "{{\"node\":{{\"id\":{id},\"parent\":{},\"ip\":{}}}}}\n",
            id - 1,
            4096 + id
        ));
    }
    body.push_str("{\"t\":20,\"tid\":1,\"dev\":0,\"api\":\"cudaMalloc\",\"res\":0,\"addr\":8192,\"size\":512,\"stack\":5000}\n");
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "deep.jsonl", body.as_bytes());
    let r = read_file(&path);
    let e = r.error.expect("an error");
    // Line 1 the header, line 2 the event, node 1 on line 3.
    assert_eq!(e.line, 2 + MAX_STACK_DEPTH as u64 + 1, "{e}");
    assert!(e.message.contains("frames deep"), "{e}");
    assert_names_place(&e, &path, body.as_bytes());
    assert_eq!(r.events, 1);
    let (code, stderr) = summary(&[&path]);
    assert_eq!(code, Some(1), "{stderr}");
}
