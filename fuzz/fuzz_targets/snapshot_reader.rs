//! Arbitrary bytes as a PyTorch snapshot, read to the model and through every figure and
//! the memory-viz writer: never a panic, and never work out of proportion to the input
//! (a memo index far ahead, one list shared by reference a billion times over).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtrace_analyzer::snapshot::{figures, memory_viz_bytes, parse_snapshot, timeline};

fuzz_target!(|data: &[u8]| {
    let Ok(snap) = parse_snapshot(data) else {
        return;
    };
    for d in &snap.devices {
        let f = figures::figures(d);
        let _ = figures::impossible(d, &f);
        let _ = timeline::ooms(d);
    }
    let _ = memory_viz_bytes(&snap);
});
