//! The replay driver: feeds a history's requests to the allocator model, in order, and
//! keeps the figures (peak reserved, fragmentation over time, the first out-of-memory).
//! Under the recorded settings, with the recorded driver, it checks every address and
//! segment event against the recording and stops where the two first differ.

use super::device::{Card, Recorded};
use super::input::{Event, History};
pub use super::outcome::{Drift, Driver, Entry, Failure, Outcome, Sample};
use super::request::Run;
use crate::allocator::check;
use crate::allocator::settings::Settings;
use crate::allocator::Allocator;
use crate::allocator::Device;
use std::collections::VecDeque;

const SAMPLES: usize = 100;

pub fn replay(
    h: &History,
    settings: &Settings,
    driver: Driver,
    keep_trace: bool,
) -> Result<Outcome, String> {
    let capacity = match driver {
        Driver::Card(c) => c,
        Driver::Recorded => None,
    };
    if settings.expandable_segments && settings.max_split_size != u64::MAX {
        // PyTorch's release_available_cached_blocks would hand a block of an expandable
        // segment to release_block, which asserts that it never gets one.
        return Err(
            "expandable_segments:True with max_split_size_mb is not modelled (PyTorch releases oversize blocks as whole segments, which blocks of expandable segments are not)"
                .into(),
        );
    }
    if settings.malloc_async {
        return Err(
            "backend:cudaMallocAsync keeps its pool in the driver, which this model does not have"
                .into(),
        );
    }
    if settings.per_process_memory_fraction.is_some() && capacity.is_none() {
        return Err("per_process_memory_fraction needs the card's size: give --capacity".into());
    }
    let mut a = Allocator::new(settings.clone(), capacity);
    for seg in &h.start {
        a.load_segment(seg)?;
        if h.private_at(seg.addr).is_some() {
            // Default-pool requests never take a private pool's free blocks.
            a.withhold_free_blocks(seg.addr);
        }
    }
    let mut recorded = Recorded::default();
    let mut card = {
        let recorded_end = h
            .start
            .iter()
            .map(|s| (s.addr, s.size))
            .chain(h.events.iter().filter_map(|e| match *e {
                Event::SegmentAlloc(s) | Event::SegmentMap(s) => Some((s.addr, s.size)),
                _ => None,
            }))
            .map(|(a, s)| a + s)
            .max()
            .unwrap_or(0);
        Card::new(
            capacity,
            recorded_end,
            h.start.iter().map(|s| (s.addr, s.size)),
        )
    };
    let mut run = Run {
        h,
        names: a.live_addresses().map(|k| (k, k)).collect(),
        trace: Vec::new(),
        keep_trace,
        drift: None,
        not_modelled: None,
        failures: Vec::new(),
        served: 0,
        checking: driver == Driver::Recorded,
    };
    let mut out = Outcome {
        settings: settings.clone(),
        driver,
        replayed: 0,
        start_reserved: a.reserved,
        peak_reserved: a.reserved,
        peak_reserved_entry: None,
        peak_allocated: a.allocated,
        peak_unused: a.reserved - a.allocated,
        samples: Vec::new(),
        failures: Vec::new(),
        recorded_failures_served: 0,
        drift: None,
        not_modelled: None,
        trace: Vec::new(),
        allocator: Allocator::new(Settings::default(), None),
    };
    let every = h.events.len().div_ceil(SAMPLES).max(1);
    let mut group: VecDeque<(usize, Event)> = VecDeque::new();
    let mut stopped = false;
    let mut next_sample = 0;
    for (i, ev) in h.events.iter().enumerate() {
        let src = h.source_index[i];
        if ev.is_segment_event() {
            group.push_back((src, ev.clone()));
            continue;
        }
        let seen: Vec<Event> = group.iter().map(|(_, e)| e.clone()).collect();
        let dev: &mut dyn Device = match driver {
            Driver::Recorded => {
                recorded.expected = std::mem::take(&mut group);
                recorded.current = src;
                &mut recorded
            }
            Driver::Card(_) => &mut card,
        };
        let stop = run.step(&mut a, dev, &seen, i, ev);
        // A request the model does not replay leaves its recorded segment events undone:
        // the stop says why, they are no drift.
        if driver == Driver::Recorded && run.drift.is_none() && run.not_modelled.is_none() {
            run.check_group_done(&mut recorded, src);
        }
        group.clear();
        out.replayed = i + 1;
        if a.reserved > out.peak_reserved {
            out.peak_reserved = a.reserved;
            out.peak_reserved_entry = Some(src);
        }
        out.peak_allocated = out.peak_allocated.max(a.allocated);
        out.peak_unused = out.peak_unused.max(a.reserved - a.allocated);
        if i >= next_sample {
            next_sample = i + every;
            out.samples.push(Sample {
                entry: src,
                reserved: a.reserved,
                allocated: a.allocated,
            });
        }
        if stop || run.drift.is_some() || run.not_modelled.is_some() {
            stopped = true;
            break;
        }
    }
    if !stopped {
        // Segment events after the last request: an empty_cache() at the end.
        let src = h.source_index.last().copied().unwrap_or(0);
        if !group.is_empty() {
            match driver {
                Driver::Recorded => {
                    recorded.expected = std::mem::take(&mut group);
                    a.release_cached(&mut recorded);
                    run.drain(&mut a, src);
                    run.check_group_done(&mut recorded, src);
                }
                Driver::Card(_) => {
                    a.release_cached(&mut card);
                    run.drain(&mut a, src);
                }
            }
        }
        out.replayed = h.events.len();
        out.samples.push(Sample {
            entry: src,
            reserved: a.reserved,
            allocated: a.allocated,
        });
    }
    if driver == Driver::Recorded && !stopped && run.drift.is_none() {
        if let Some(end) = &h.end {
            let src = h.source_index.last().copied().unwrap_or(0);
            run.drift = check::end_state(&a, end).map(|message| Drift {
                entry: src,
                message,
            });
        }
    }
    out.failures = run.failures;
    out.recorded_failures_served = run.served;
    // A driver call that differs was made before the request's address was known: when
    // both differ at one request, it is the first difference.
    out.drift = recorded.drift.take().or(run.drift);
    out.not_modelled = run.not_modelled;
    out.trace = run.trace;
    out.allocator = a;
    Ok(out)
}

pub(super) fn describe(e: &Event) -> String {
    match e {
        Event::SegmentAlloc(s) => format!("segment_alloc {:#x} of {} bytes", s.addr, s.size),
        Event::SegmentFree(s) => format!("segment_free {:#x} of {} bytes", s.addr, s.size),
        Event::SegmentMap(s) => format!("segment_map {:#x} of {} bytes", s.addr, s.size),
        Event::SegmentUnmap(s) => format!("segment_unmap {:#x} of {} bytes", s.addr, s.size),
        other => format!("{other:?}"),
    }
}
