//! Reading a trace to its end, and what the bad-input tests check of it: shared by
//! `bad_input.rs` (real traces mutated) and `bad_files.rs` (files made bad by hand).

use super::{run_within, traced};
use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use vramtrace_schema::reader::{ReadNotes, TraceError, TraceReader};
use vramtrace_tests::harness::vramtrace;

/// A real trace, recorded once per test binary by a workload (runtime_dynamic: every
/// kind of call, a failed allocation, an end record).
pub fn recorded() -> &'static [u8] {
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
pub struct Read_ {
    pub events: usize,
    pub notes: ReadNotes,
    pub error: Option<TraceError>,
    /// The events and their stacks in order, folded into one number, to compare two reads.
    pub digest: u64,
    /// Marker names read.
    pub names: usize,
}

pub fn read_all<R: Read>(path: &Path, input: R) -> Read_ {
    catch_unwind(AssertUnwindSafe(|| {
        read_from(TraceReader::new(path, input))
    }))
    .unwrap_or_else(|_| panic!("the reader panicked on {}", path.display()))
}

pub fn read_from<R: Read>(opened: Result<TraceReader<R>, TraceError>) -> Read_ {
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

pub fn read_file(path: &Path) -> Read_ {
    read_all(path, std::fs::File::open(path).unwrap())
}

/// An error names this file and a line that exists (1-based), and says so in its text.
pub fn assert_names_place(e: &TraceError, path: &Path, bytes: &[u8]) {
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
pub fn summary(files: &[&Path]) -> (Option<i32>, String) {
    let out = Command::new(vramtrace())
        .arg("summary")
        .args(files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stderr)
}
