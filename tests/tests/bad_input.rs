//! Bad input: real traces mutated at random (bounded, reproducible). Never a panic:
//! events, an error that names the file and the line, or a counted skip. (Files made bad
//! by hand, those people might hand the reader by mistake or malice: `bad_files.rs`.)

mod support;

use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use support::reading::{assert_names_place, read_file, read_from, recorded, summary, Read_};
use support::{run_within, traced, Rng};
use vramtrace_schema::reader::{ParsePool, TraceReader, MIN_WINDOW};
use vramtrace_tests::harness::vramtrace;

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
