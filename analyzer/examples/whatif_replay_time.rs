//! Times `vramtrace whatif`'s replays alone, the snapshot already read: as recorded (every
//! address and segment event checked), under other settings on a card without limit, and
//! the capacity search. `cargo run --release --example whatif_replay_time SNAPSHOT
//! [KEY:VALUE]`; scripts/bench.sh reports its figures.

use std::time::Instant;
use vramtrace_analyzer::snapshot::read_snapshot;
use vramtrace_analyzer::whatif::from_snapshot::{histories, infer_expandable};
use vramtrace_analyzer::whatif::search::smallest_capacity;
use vramtrace_analyzer::whatif::{replay, Driver, Settings};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: whatif_replay_time SNAPSHOT [KEY:VALUE]")?;
    let other = args.get(2).map_or("max_split_size_mb:128", String::as_str);
    let snap = read_snapshot(std::path::Path::new(path))?;
    let mut recorded = Settings::from_recorded(snap.allocator_settings.as_ref())?;
    infer_expandable(&snap, &mut recorded);
    let mut changed = recorded.clone();
    changed.set(other)?;
    for h in histories(&snap, &recorded)? {
        let at = Instant::now();
        let o = replay(&h, &recorded, Driver::Recorded, false)?;
        let as_recorded = at.elapsed().as_secs_f64();
        let at = Instant::now();
        replay(&h, &changed, Driver::Card(None), false)?;
        let on_card = at.elapsed().as_secs_f64();
        let at = Instant::now();
        let search = smallest_capacity(&h, &recorded)?;
        let searched = at.elapsed().as_secs_f64();
        println!(
            "device {}: {} events; as recorded {as_recorded:.3} s ({}); {other} {on_card:.3} s; capacity search {searched:.3} s, {} replays",
            h.device,
            h.events.len(),
            if o.drift.is_none() { "exact" } else { "drifts" },
            search.replays
        );
    }
    Ok(())
}
