//! The snapshot unpickler (PyTorch memory snapshots) on arbitrary bytes: a value or an
//! error, never a panic, never unbounded work.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vramtrace_analyzer::snapshot::pickle::parse(data);
});
