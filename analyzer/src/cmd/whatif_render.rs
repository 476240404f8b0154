//! `vramtrace whatif`'s answer per device: one JSON object (docs/json.md), or the text
//! table of its scenarios.

use crate::units::bytes;
use crate::whatif::device_layer::Outside;
use crate::whatif::replay::Driver;
use crate::whatif::{History, Outcome};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// A device's history, the card its recorded failure shows, and its columns.
pub(super) struct Device<'h> {
    pub(super) h: &'h History,
    pub(super) card: Option<(u64, usize)>,
    /// What the run directory's traces show outside the allocator.
    pub(super) layer: Option<Outside>,
    /// The capacity the scenarios on a card replay on.
    pub(super) capacity: Option<u64>,
    pub(super) cols: Vec<Column>,
}

pub(super) struct Column {
    pub(super) name: String,
    pub(super) outcome: Outcome,
    pub(super) smallest: Option<u64>,
    pub(super) search_replays: usize,
}

fn driver_json(d: Driver) -> Value {
    match d {
        Driver::Recorded => json!("recorded"),
        Driver::Card(c) => json!({ "capacity_bytes": c }),
    }
}

pub(super) fn device_json(d: &Device) -> Value {
    let (h, cols) = (d.h, &d.cols);
    let scenarios: Vec<Value> = cols
        .iter()
        .map(|c| {
            let o = &c.outcome;
            let failures: Vec<Value> = o
                .failures
                .iter()
                .map(|f| {
                    json!({
                        "entry": f.entry, "requested_bytes": f.requested, "stream": f.stream,
                        "reserved_bytes": f.reserved, "allocated_bytes": f.allocated,
                        "largest_free_block_bytes": f.largest_free, "recorded": f.recorded,
                    })
                })
                .collect();
            let samples: Vec<Value> = o
                .samples
                .iter()
                .map(|s| json!({"entry": s.entry, "reserved_bytes": s.reserved, "allocated_bytes": s.allocated}))
                .collect();
            json!({
                "name": c.name,
                "settings": o.settings.describe(),
                "driver": driver_json(o.driver),
                "events": h.events.len(),
                "events_replayed": o.replayed,
                "start_reserved_bytes": o.start_reserved,
                "peak_reserved_bytes": o.peak_reserved,
                "peak_reserved_entry": o.peak_reserved_entry,
                "peak_allocated_bytes": o.peak_allocated,
                "peak_unused_reserved_bytes": o.peak_unused,
                "end_reserved_bytes": o.allocator.reserved,
                "end_allocated_bytes": o.allocator.allocated,
                "fragmentation": samples,
                "failures": failures,
                "recorded_failures_served": o.recorded_failures_served,
                "drift": o.drift.as_ref().map(|d| json!({"entry": d.entry, "message": d.message})),
                "not_modelled": o.not_modelled.as_ref().map(|d| json!({"entry": d.entry, "message": d.message})),
                "smallest_capacity_bytes": c.smallest,
                "capacity_search_replays": c.search_replays,
            })
        })
        .collect();
    let layer = d.layer.map(|l| {
        json!({
            "total_bytes": l.total, "outside_bytes": l.outside,
            "capacity_bytes": l.capacity(), "driver_answers": l.answers,
        })
    });
    json!({
        "device": h.device,
        "recorded_card_bytes": d.card.map(|c| c.0),
        "recorded_card_entry": d.card.map(|c| c.1),
        "device_layer": layer,
        "card_bytes": d.capacity,
        "scenarios": scenarios,
    })
}

pub(super) fn text(out: &mut String, d: &Device) {
    let (h, cols) = (d.h, &d.cols);
    let _ = writeln!(
        out,
        "device {}: {} events replayed from the recorded state at the trace's start",
        h.device,
        h.events.len()
    );
    if let (Some(l), Some(c)) = (d.layer, d.capacity) {
        if c == l.capacity() {
            let _ = writeln!(
                out,
                "  other settings replayed on {}: the card's {} less {} the driver showed in use outside the allocator (the most at any of {} answers)",
                bytes(c),
                bytes(l.total),
                bytes(l.outside),
                l.answers
            );
        }
    }
    if let Some((capacity, entry)) = d
        .card
        .filter(|c| d.layer.is_none() && Some(c.0) == d.capacity)
    {
        let _ = writeln!(
            out,
            "  other settings replayed on {}: the card as the out-of-memory error at entry {entry} shows it (reserved there plus the driver's free bytes)",
            bytes(capacity)
        );
    }
    let width = cols.iter().map(|c| c.name.len()).max().unwrap_or(0).max(8);
    let _ = writeln!(
        out,
        "  {:width$}  {:>12}  {:>12}  {:>12}  {:>12}  result",
        "settings", "peak reserv.", "peak alloc.", "max unused", "fits in"
    );
    for c in cols {
        let o = &c.outcome;
        let fits = c.smallest.map_or("-".to_string(), bytes);
        let result = if let Some(d) = &o.not_modelled {
            format!("stops at entry {}: {}", d.entry, d.message)
        } else if let Some(d) = &o.drift {
            format!(
                "drifts from the recording at entry {}: {}",
                d.entry, d.message
            )
        } else if let Some(f) = o.new_failure() {
            format!(
                "out of memory at entry {}: {} requested with {} reserved, {} allocated, largest free block {}",
                f.entry,
                bytes(f.requested),
                bytes(f.reserved),
                bytes(f.allocated),
                bytes(f.largest_free)
            )
        } else if o.driver == Driver::Recorded {
            "matches the recording: every address, segment event and final block".to_string()
        } else {
            "runs".to_string()
        };
        let _ = writeln!(
            out,
            "  {:width$}  {:>12}  {:>12}  {:>12}  {:>12}  {result}",
            c.name,
            bytes(o.peak_reserved),
            bytes(o.peak_allocated),
            bytes(o.peak_unused),
            fits
        );
        let recorded = o.failures.iter().filter(|f| f.recorded).count();
        if recorded > 0 || o.recorded_failures_served > 0 {
            let _ = writeln!(
                out,
                "  {:width$}  recorded out-of-memory errors: {recorded} again, {} served here",
                "", o.recorded_failures_served
            );
        }
        let _ = writeln!(
            out,
            "  {:width$}  unused reserved over the trace: {}",
            "",
            unused_line(&o.samples)
        );
    }
}

/// Reserved less allocated at ten points spread over the samples: fragmentation over time.
fn unused_line(samples: &[crate::whatif::outcome::Sample]) -> String {
    const POINTS: usize = 10;
    let step = samples.len().div_ceil(POINTS).max(1);
    let words: Vec<String> = samples
        .iter()
        .step_by(step)
        .chain(samples.last())
        .map(|s| bytes(s.reserved - s.allocated))
        .collect();
    words.join(", ")
}
