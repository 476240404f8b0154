//! The snapshot unpickler (PyTorch memory snapshots) on arbitrary bytes: a value or an
//! error, never a panic, never unbounded work; and the same value or error whether history
//! entries are read in one step (in memory, or from a stream read ahead on a thread) or
//! opcode by opcode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtrace_analyzer::snapshot::pickle;

fuzz_target!(|data: &[u8]| {
    let by_opcode = format!("{:?}", pickle::parse_opcode_by_opcode(data));
    assert_eq!(format!("{:?}", pickle::parse(data)), by_opcode);
    let ahead = pickle::parse_reader(&mut { data });
    assert_eq!(format!("{:?}", ahead), by_opcode);
});
