//! Arbitrary bytes as a trace, replayed through every view: never a panic, and (with
//! libFuzzer's -timeout and -rss_limit_mb) never work or memory out of proportion to the
//! input - the class of a t = 2^62 timeline, a device ordinal of 2^31, a 5,000-deep stack
//! chain or a failure per live group.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtrace_analyzer::run::{LoadOptions, Run};
use vramtrace_analyzer::snapshot::memory_viz_bytes;
use vramtrace_analyzer::views::{leaks, memory_viz, oom, peak, summary, timeline};

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("vramtrace-fuzz-{}.jsonl", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let mut line = timeline::TimelineBuilder::new(None);
    let mut ooms = oom::OomWatch::default();
    let mut viz = memory_viz::MemoryVizBuilder::new(memory_viz::DEFAULT_MAX_ENTRIES);
    let loaded = Run::load(&[path.clone()], LoadOptions::default(), |s| {
        line.step(s);
        ooms.step(s);
        viz.step(s);
    });
    let _ = std::fs::remove_file(&path);
    let Ok(run) = loaded else {
        return;
    };
    let _ = line.finish(&run);
    let _ = ooms.finish(&run);
    let _ = memory_viz_bytes(&viz.finish(&run));
    let _ = summary::build(&run);
    let _ = leaks::build(&run);
    let _ = peak::build(&run, None);
    let _ = run.problems();
});
