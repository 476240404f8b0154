//! The replay driver: feeds a history's requests to the allocator model, in order, and
//! keeps the figures (peak reserved, fragmentation over time, the first out-of-memory).
//! Under the recorded settings, with the recorded driver, it checks every address and
//! segment event against the recording and stops where the two first differ.

use super::allocator::{Allocator, Change};
use super::check;
use super::device::{Card, Device, Recorded};
use super::input::{Event, History};
use super::oom::OutOfMemory;
pub use super::outcome::{Drift, Driver, Entry, Failure, Outcome, Sample};
use super::settings::Settings;
use super::sizes::round_size;
use rustc_hash::FxHashMap;
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
        names: a.live.keys().map(|&k| (k, k)).collect(),
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
        if driver == Driver::Recorded && run.drift.is_none() {
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
    out.drift = run.drift.or(recorded.drift.take());
    out.not_modelled = run.not_modelled;
    out.trace = run.trace;
    out.allocator = a;
    Ok(out)
}

struct Run<'h> {
    h: &'h History,
    /// Recorded block address to replayed block address, for live blocks.
    names: FxHashMap<u64, u64>,
    trace: Vec<Entry>,
    keep_trace: bool,
    drift: Option<Drift>,
    not_modelled: Option<Drift>,
    failures: Vec<Failure>,
    served: usize,
    /// Compare addresses with the recording.
    checking: bool,
}

impl Run<'_> {
    /// Replays one request; whether the replay must stop.
    fn step(
        &mut self,
        a: &mut Allocator,
        dev: &mut dyn Device,
        group: &[Event],
        i: usize,
        ev: &Event,
    ) -> bool {
        let src = self.h.source_index[i];
        if let Some(why) = self.private_pool(ev) {
            self.not_modelled = Some(Drift {
                entry: src,
                message: why,
            });
            return true;
        }
        let is_request = matches!(ev, Event::Alloc { .. } | Event::Oom { .. });
        let frees = group
            .iter()
            .any(|e| matches!(e, Event::SegmentFree(_) | Event::SegmentUnmap(_)));
        let allocs = group
            .iter()
            .any(|e| matches!(e, Event::SegmentAlloc(_) | Event::SegmentMap(_)));
        // Cached segments released outside a request's own out-of-memory path (which ends
        // in a new segment or a failure) were released by the program: empty_cache().
        let empty_cache = frees
            && match *ev {
                Event::Alloc { size, stream, .. } => !allocs || a.would_reuse(size, stream),
                _ => !is_request,
            };
        if empty_cache {
            a.release_cached(dev);
            self.drain(a, src);
        }
        match *ev {
            Event::Alloc { size, stream, addr } => match a.malloc(dev, size, stream) {
                Ok(id) => {
                    self.drain(a, src);
                    let got = a.block(id).addr;
                    self.names.insert(addr, got);
                    self.entry("alloc", got, size, stream, src);
                    if self.checking && got != addr {
                        self.drift_alloc(a, src, size, stream, addr, got);
                    }
                    false
                }
                Err(oom) => {
                    self.fail(a, src, &oom, stream, false);
                    true
                }
            },
            Event::Oom { size, stream, .. } => match a.malloc(dev, size, stream) {
                Ok(id) => {
                    // The program got an error here and went on without the memory.
                    self.drain(a, src);
                    self.served += 1;
                    let addr = a.block(id).addr;
                    a.free(addr, false);
                    false
                }
                Err(oom) => {
                    self.fail(a, src, &oom, stream, true);
                    false
                }
            },
            Event::FreeRequested { addr, size } => {
                let Some(&got) = self.names.get(&addr) else {
                    self.drift = Some(Drift {
                        entry: src,
                        message: format!(
                            "free_requested of {addr:#x}, which the replay does not hold"
                        ),
                    });
                    return true;
                };
                a.free(got, true);
                let stream = a.live_block(got).map_or(0, |id| a.block(id).stream);
                self.entry("free_requested", got, size, stream, src);
                false
            }
            Event::FreeCompleted { addr, size } => {
                let Some(got) = self.names.remove(&addr) else {
                    self.drift = Some(Drift {
                        entry: src,
                        message: format!(
                            "free_completed of {addr:#x}, which the replay does not hold"
                        ),
                    });
                    return true;
                };
                // Absent if the replay completed it early, releasing cached memory.
                let mut stream = 0;
                if let Some(id) = a.live_block(got).filter(|&id| a.block(id).pending_free) {
                    stream = a.block(id).stream;
                    a.free(got, false);
                }
                self.drain(a, src);
                self.entry("free_completed", got, size, stream, src);
                false
            }
            Event::SegmentAlloc(_)
            | Event::SegmentFree(_)
            | Event::SegmentMap(_)
            | Event::SegmentUnmap(_) => false,
        }
    }

    /// Why a request in a private pool (recorded in one of its segments) is not replayed.
    fn private_pool(&self, ev: &Event) -> Option<String> {
        let (what, addr) = match *ev {
            Event::Alloc { addr, .. } => ("alloc", addr),
            Event::FreeRequested { addr, .. } => ("free_requested", addr),
            Event::FreeCompleted { addr, .. } => ("free_completed", addr),
            _ => return None,
        };
        let s = self.h.private_at(addr)?;
        Some(format!(
            "{what} at {addr:#x}, in segment {:#x} of private pool ({}, {}) (a CUDA graph's or torch.cuda.MemPool's): private pools are not modelled, so the replay stops here",
            s.addr, s.pool.0, s.pool.1
        ))
    }

    /// A request the replay could not serve.
    fn fail(
        &mut self,
        a: &mut Allocator,
        src: usize,
        oom: &OutOfMemory,
        stream: u64,
        recorded: bool,
    ) {
        self.drain(a, src);
        self.entry("oom", 0, oom.requested, stream, src);
        self.failures.push(Failure {
            entry: src,
            requested: oom.requested,
            stream,
            reserved: oom.reserved,
            allocated: oom.allocated,
            largest_free: a.largest_free(),
            recorded,
        });
    }

    /// Moves the allocator's driver calls into the replayed trace.
    fn drain(&mut self, a: &mut Allocator, src: usize) {
        for c in std::mem::take(&mut a.changes) {
            match c {
                Change::SegmentAlloc(s) => {
                    self.entry("segment_alloc", s.addr, s.size, s.stream, src)
                }
                Change::SegmentFree(s) => self.entry("segment_free", s.addr, s.size, s.stream, src),
                Change::SegmentMap(s) => self.entry("segment_map", s.addr, s.size, s.stream, src),
                Change::SegmentUnmap(s) => {
                    self.entry("segment_unmap", s.addr, s.size, s.stream, src)
                }
                // The input's own free_completed entry stands for it, in its place.
                Change::FreeCompleted(_) => {}
            }
        }
    }

    fn entry(&mut self, action: &'static str, addr: u64, size: u64, stream: u64, source: usize) {
        if self.keep_trace {
            self.trace.push(Entry {
                action,
                addr,
                size,
                stream,
                source,
            });
        }
    }

    fn check_group_done(&mut self, recorded: &mut Recorded, src: usize) {
        if let Some(d) = recorded.drift.take() {
            self.drift = Some(d);
        } else if let Some((at, e)) = recorded.expected.front() {
            self.drift = Some(Drift {
                entry: *at,
                message: format!(
                    "the recording has {} here (before entry {src}), which the replay did not do",
                    describe(e)
                ),
            });
        }
    }

    fn drift_alloc(
        &mut self,
        a: &Allocator,
        src: usize,
        size: u64,
        stream: u64,
        recorded: u64,
        got: u64,
    ) {
        let rounded = round_size(size, &a.settings);
        let why = check::explain_address(a, recorded, stream);
        self.drift = Some(Drift {
            entry: src,
            message: format!(
                "alloc of {size} bytes (block {rounded}) on stream {stream:#x}: recorded at {recorded:#x}, replayed at {got:#x}; {why}"
            ),
        });
    }
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
