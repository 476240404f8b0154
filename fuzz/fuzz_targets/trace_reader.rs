//! The trace reader on arbitrary bytes: it may return events, skip what it does not know,
//! or stop with an error, but never panic, and every error names the file and a line
//! that exists.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use vramtrace_schema::reader::TraceReader;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.jsonl");
    let lines = data.split(|&b| b == b'\n').count() as u64;
    let check = |e: &vramtrace_schema::reader::TraceError| {
        assert_eq!(e.path, path);
        assert!(e.line >= 1 && e.line <= lines.max(1), "{e}");
    };
    let mut reader = match TraceReader::new(path, data) {
        Ok(r) => r,
        Err(e) => return check(&e),
    };
    loop {
        match reader.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => return check(&e),
        }
    }
});
