//! Arbitrary bytes as a PyTorch snapshot, read to the model and through every figure and
//! the memory-viz writer, and streamed as the views read it (its events): never a panic,
//! and never work out of proportion to the input (a memo index far ahead, one list shared
//! by reference a billion times over).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtrace_analyzer::snapshot::events::SnapshotEvents;
use vramtrace_analyzer::snapshot::{figures, memory_viz_bytes, parse_snapshot, pickle, timeline};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = pickle::parse(data) {
        let path = std::path::Path::new("fuzz.pickle");
        if let Ok(mut events) = SnapshotEvents::from_pickle(path, p, false) {
            while events.next_event().is_some() {}
        }
    }
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
