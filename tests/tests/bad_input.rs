//! Bad input: real traces mutated at random (bounded, reproducible), and the files people
//! might hand the reader by mistake or malice. Never a panic: events, an error that names
//! the file and the line, or a counted skip.

mod support;

use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use support::{run_within, traced, Rng};
use vramtrace_schema::reader::{
    ParsePool, ReadNotes, TraceError, TraceReader, MAX_LINE, MIN_WINDOW,
};
use vramtrace_tests::harness::vramtrace;

/// A real trace, recorded once per test binary by a workload (runtime_dynamic: every
/// kind of call, a failed allocation, an end record).
fn recorded() -> &'static [u8] {
    static TRACE: OnceLock<Vec<u8>> = OnceLock::new();
    TRACE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("real.jsonl");
        let out = run_within(
            &mut traced("runtime_dynamic", &[], &path.display().to_string()),
            std::time::Duration::from_secs(120),
        );
        assert!(out.status.success());
        std::fs::read(&path).unwrap()
    })
}

/// What reading a file to its end gave.
#[derive(Debug)]
struct Read_ {
    events: usize,
    notes: ReadNotes,
    error: Option<TraceError>,
    /// The events and their stacks in order, folded into one number, to compare two reads.
    digest: u64,
    /// Marker names read.
    names: usize,
}

fn read_all<R: Read>(path: &Path, input: R) -> Read_ {
    catch_unwind(AssertUnwindSafe(|| {
        read_from(TraceReader::new(path, input))
    }))
    .unwrap_or_else(|_| panic!("the reader panicked on {}", path.display()))
}

/// As [`read_all`], parsing on the reader's own thread.
fn read_parallel<R: Read + Send + 'static>(path: &Path, input: R) -> Read_ {
    catch_unwind(AssertUnwindSafe(|| {
        read_from(TraceReader::new_parallel(path, input))
    }))
    .unwrap_or_else(|_| panic!("the parallel reader panicked on {}", path.display()))
}

/// The pool every pooled read of this test binary shares, as a run's readers share one.
fn pool() -> &'static ParsePool {
    static POOL: OnceLock<ParsePool> = OnceLock::new();
    POOL.get_or_init(ParsePool::new)
}

/// As [`read_all`], parsed a batch ahead by a pool shared with other readers.
fn read_pooled<R: Read + Send + 'static>(path: &Path, input: R) -> Read_ {
    catch_unwind(AssertUnwindSafe(|| {
        read_from(TraceReader::new_pooled(path, input, pool()))
    }))
    .unwrap_or_else(|_| panic!("the pooled reader panicked on {}", path.display()))
}

fn read_from<R: Read>(opened: Result<TraceReader<R>, TraceError>) -> Read_ {
    let mut reader = match opened {
        Ok(r) => r,
        Err(e) => {
            return Read_ {
                events: 0,
                notes: ReadNotes::default(),
                error: Some(e),
                digest: 0,
                names: 0,
            }
        }
    };
    let mut events = 0;
    let mut digest = 0u64;
    let error = loop {
        match reader.next_event() {
            Ok(Some(e)) => {
                events += 1;
                digest = digest.rotate_left(7) ^ e.t ^ e.addr.wrapping_mul(31);
                for ip in reader.stacks.ips(e.stack) {
                    digest = digest.rotate_left(3) ^ ip;
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    Read_ {
        events,
        notes: reader.notes.clone(),
        error,
        digest,
        names: reader.names.len(),
    }
}

fn read_file(path: &Path) -> Read_ {
    read_all(path, std::fs::File::open(path).unwrap())
}

/// An error names this file and a line that exists (1-based), and says so in its text.
fn assert_names_place(e: &TraceError, path: &Path, bytes: &[u8]) {
    assert_eq!(e.path, path);
    let lines = bytes.split(|&b| b == b'\n').count() as u64;
    assert!(
        (1..=lines.max(1)).contains(&e.line),
        "{e} (file has {lines} lines)"
    );
    assert!(
        e.to_string()
            .starts_with(&format!("{}:{}: ", path.display(), e.line)),
        "{e}"
    );
}

/// `vramtrace summary` on `files`: no panic, and every problem named by file and line.
fn summary(files: &[&Path]) -> (Option<i32>, String) {
    let out = Command::new(vramtrace())
        .arg("summary")
        .args(files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stderr)
}

/// The views that lay out time and devices (timeline, report, the memory-viz export) on
/// `path`, each under a 4-GiB address-space limit and a deadline: they end by themselves,
/// with 0 or 1, whatever the mutant holds (an event at t = 2^62 or a device ordinal of
/// 2^31 aborted them).
fn views_survive(path: &Path, n: usize, what: &str) {
    let out = tempfile::tempdir().unwrap();
    let (html, pickle) = (out.path().join("r.html"), out.path().join("m.pickle"));
    for args in [
        vec!["timeline".as_ref(), path.as_os_str()],
        vec![
            "report".as_ref(),
            "-o".as_ref(),
            html.as_os_str(),
            path.as_os_str(),
        ],
        vec![
            "export".as_ref(),
            "--format".as_ref(),
            "memory-viz".as_ref(),
            "-o".as_ref(),
            pickle.as_os_str(),
            path.as_os_str(),
        ],
    ] {
        let run = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 4194304; exec timeout 120 \"$0\" \"$@\"")
            .arg(vramtrace())
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            matches!(run.status.code(), Some(0 | 1)),
            "mutant {n} ({what}): {args:?} gave {:?}: {stderr}",
            run.status
        );
        assert!(
            !stderr.contains("panicked"),
            "mutant {n} ({what}): {stderr}"
        );
    }
}

fn mutate(rng: &mut Rng, original: &[u8]) -> (String, Vec<u8>) {
    let mut b = original.to_vec();
    let lines: Vec<&[u8]> = original.split_inclusive(|&c| c == b'\n').collect();
    let what = rng.below(9);
    let name = match what {
        0 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            "bit flips"
        }
        1 => {
            b.truncate(rng.below(b.len()));
            "truncation"
        }
        2 => {
            let i = rng.below(lines.len());
            let mut v: Vec<&[u8]> = lines.clone();
            v.insert(i, lines[i]);
            b = v.concat();
            "line duplicated"
        }
        3 => {
            let junk: Vec<u8> = (0..1 + rng.below(64)).map(|_| rng.next() as u8).collect();
            let i = rng.below(b.len());
            b.splice(i..i, junk);
            "binary junk inserted"
        }
        4 => {
            let i = rng.below(lines.len());
            let mut v: Vec<&[u8]> = lines.clone();
            v.remove(i);
            b = v.concat();
            "line removed"
        }
        5 => {
            let (i, j) = (rng.below(lines.len()), rng.below(lines.len()));
            let mut v: Vec<&[u8]> = lines.clone();
            v.swap(i, j);
            b = v.concat();
            "lines swapped"
        }
        6 => {
            // a byte replaced by a JSON-significant one
            let i = rng.below(b.len());
            let structural = b"{}[]\":,0-9e\\\n ";
            b[i] = structural[rng.below(structural.len())];
            "structural byte"
        }
        8 => {
            // a digit run replaced by an extreme value that still parses: a time of
            // 2^62, the largest ordinal, size or count
            let digits: Vec<usize> = (0..b.len()).filter(|&i| b[i].is_ascii_digit()).collect();
            if let Some(&i) = digits.get(rng.below(digits.len().max(1))) {
                let end = (i..b.len())
                    .find(|&j| !b[j].is_ascii_digit())
                    .unwrap_or(b.len());
                let extreme: &[u8] = [
                    &b"4611686018427387904"[..],
                    b"2147483647",
                    b"18446744073709551615",
                    b"4294967295",
                ][rng.below(4)];
                b.splice(i..end, extreme.iter().copied());
            }
            "extreme value"
        }
        _ => {
            // a digit run replaced by a huge or negative number
            let i = rng.below(b.len());
            let big: &[u8] =
                [&b"99999999999999999999999"[..], b"-1", b"1e400", b"null"][rng.below(4)];
            b.splice(i..i, big.iter().copied());
            "number inserted"
        }
    };
    (name.to_string(), b)
}

/// On a failure, copies the failing mutant and the trace it came from out of the
/// temporary directory and names them: the trace is recorded afresh on each run, so the
/// seed alone does not give the same mutant again.
struct KeepOnFailure<'a> {
    dir: &'a Path,
    mutant: PathBuf,
}

impl Drop for KeepOnFailure<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let keep = std::env::temp_dir().join(format!("vramtrace-bad-input-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&keep);
        for name in [
            "original.jsonl".as_ref(),
            self.mutant.file_name().unwrap_or_default(),
        ] {
            let _ = std::fs::copy(self.dir.join(name), keep.join(name));
        }
        eprintln!(
            "the failing mutant and its original are kept in {}",
            keep.display()
        );
    }
}

/// A real trace of one pipeline rank (thousands of events with stacks), and its bytes.
fn pipeline_rank(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("rank.jsonl");
    let out = run_within(
        traced("pipeline", &["20"], &path.display().to_string()).env("RANK", "0"),
        std::time::Duration::from_secs(120),
    );
    assert!(out.status.success());
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// A run of many ranks reads its traces in turn, each parsed by a pool's threads a batch
/// ahead (and by the reader itself when its batch is not ready): 40 readers of one real
/// trace of a pipeline rank (thousands of events with stacks), taken one event at a time
/// in turn, each read exactly what one reader alone reads.
#[test]
fn readers_sharing_a_parse_pool_each_read_what_one_reader_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = pipeline_rank(dir.path());
    let alone = {
        let mut reader = TraceReader::new(&path, &bytes[..]).unwrap();
        reader.set_window(MIN_WINDOW);
        let mut events = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            events.push((e.t, e.addr, reader.stacks.ips(e.stack)));
        }
        events
    };
    assert!(alone.len() > 2000, "{} events", alone.len());
    let mut readers: Vec<_> = (0..40)
        .map(|_| {
            let mut r = TraceReader::new_pooled(&path, std::io::Cursor::new(bytes.clone()), pool())
                .unwrap();
            r.set_window(MIN_WINDOW);
            (r, Vec::new(), false)
        })
        .collect();
    while readers.iter().any(|r| !r.2) {
        for (reader, events, done) in readers.iter_mut().filter(|r| !r.2) {
            match reader.next_event().unwrap() {
                Some(e) => events.push((e.t, e.addr, reader.stacks.ips(e.stack))),
                None => *done = true,
            }
        }
    }
    for (n, (reader, events, _)) in readers.iter().enumerate() {
        assert!(*events == alone, "reader {n} read otherwise");
        assert_eq!(reader.notes.late_events, 0, "reader {n}");
    }
}

/// Input whose reads after the first, or whose drop, panic: a bug below the parser.
struct Panicking {
    bytes: std::io::Cursor<Vec<u8>>,
    reads: usize,
    on_drop: bool,
}

impl Read for Panicking {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reads += 1;
        if self.reads > 1 && !self.on_drop {
            panic!("a read failed as a bug would");
        }
        self.bytes.read(buf)
    }
}

impl Drop for Panicking {
    fn drop(&mut self) {
        if self.on_drop && !std::thread::panicking() {
            panic!("a drop failed as a bug would");
        }
    }
}

/// A panic while a pooled reader's lines are parsed, on a pool thread or on the reader's
/// own, or while they are dropped at the end, ends that trace with an error that names
/// it: never a hang, a panic in the caller, or a silent end.
#[test]
fn a_pooled_reader_whose_input_panics_ends_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = pipeline_rank(dir.path());
    assert!(
        bytes.len() > 1 << 17,
        "{} bytes: one read would hold it all",
        bytes.len()
    );
    for on_drop in [false, true] {
        for round in 0..20 {
            let (done, result) = std::sync::mpsc::channel();
            let (bytes, file) = (bytes.clone(), path.clone());
            std::thread::spawn(move || {
                let input = Panicking {
                    bytes: std::io::Cursor::new(bytes),
                    reads: 0,
                    on_drop,
                };
                let read = catch_unwind(AssertUnwindSafe(|| {
                    let mut reader = TraceReader::new_pooled(&file, input, pool()).unwrap();
                    let mut events = 0;
                    let error = loop {
                        match reader.next_event() {
                            Ok(Some(_)) => events += 1,
                            Ok(None) => break None,
                            Err(e) => break Some(e),
                        }
                    };
                    // Asked again after the error, it answers at once.
                    let again = reader.next_event().map(|e| e.is_some());
                    (events, error, again)
                }));
                let _ = done.send(read);
            });
            let what = format!("round {round} (panic on drop: {on_drop})");
            let (events, error, again) = result
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{what} hung"))
                .unwrap_or_else(|_| panic!("{what}: the panic reached the caller"));
            let error = error.unwrap_or_else(|| panic!("{what}: {events} events and no error"));
            assert_eq!(error.path, path, "{what}");
            assert!(
                error.message.contains("parsing thread failed"),
                "{what}: {}",
                error.message
            );
            assert!(
                !matches!(again, Ok(true)),
                "{what}: an event after the error"
            );
        }
    }
}

/// 600 mutants of a real trace (fixed seed: a failure names its mutant and keeps it),
/// each read to the end; every 30th also through `vramtrace summary`.
#[test]
fn mutated_real_traces_never_panic_and_errors_name_the_place() {
    let original = recorded();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("original.jsonl"), original).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut errors = 0;
    for n in 0..600 {
        let (what, bytes) = mutate(&mut rng, original);
        let path = dir.path().join(format!("mutant-{n}.jsonl"));
        std::fs::write(&path, &bytes).unwrap();
        let keep = KeepOnFailure {
            dir: dir.path(),
            mutant: path.clone(),
        };
        let read = read_file(&path);
        // Parsing on the reader's own thread reads exactly the same.
        let parallel = read_parallel(&path, std::fs::File::open(&path).unwrap());
        assert_eq!(
            (read.events, read.digest, read.names, &read.error),
            (
                parallel.events,
                parallel.digest,
                parallel.names,
                &parallel.error
            ),
            "mutant {n} ({what}), read in line and in parallel"
        );
        assert_eq!(
            format!("{:?}", read.notes),
            format!("{:?}", parallel.notes),
            "mutant {n}"
        );
        // And parsed by a pool of threads shared with other readers.
        let pooled = read_pooled(&path, std::fs::File::open(&path).unwrap());
        assert_eq!(
            (read.events, read.digest, read.names, &read.error),
            (pooled.events, pooled.digest, pooled.names, &pooled.error),
            "mutant {n} ({what}), read in line and by a pool"
        );
        assert_eq!(
            format!("{:?}", read.notes),
            format!("{:?}", pooled.notes),
            "mutant {n}"
        );
        if let Some(e) = &read.error {
            errors += 1;
            assert_names_place(e, &path, &bytes);
        }
        if n % 30 == 0 || what == "extreme value" {
            views_survive(&path, n, &what);
        }
        if n % 30 == 0 {
            let (code, stderr) = summary(&[&path]);
            match &read.error {
                // A cut last line could not be read either: exit status 1.
                None => assert_eq!(
                    code,
                    Some(i32::from(read.notes.truncated_line.is_some())),
                    "mutant {n} ({what}): {stderr}"
                ),
                Some(e) => {
                    assert_ne!(code, Some(0), "mutant {n} ({what})");
                    assert!(
                        stderr.contains(&format!("{}:{}:", path.display(), e.line)),
                        "mutant {n} ({what}): {stderr}"
                    );
                }
            }
        }
        drop(keep);
        std::fs::remove_file(&path).unwrap();
    }
    // The mutations do break things: the test is not vacuous.
    assert!(errors > 100, "only {errors} of 600 mutants were errors");
}

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
