//! One request replayed: the program's calls in the recorded order (alloc, the two halves
//! of a free, a request that failed), with `empty_cache()` where the recorded segment
//! events show it; the replayed entries kept for `-o`; failures, drifts and requests the
//! model does not replay noted where they happen.

use super::device::Recorded;
use super::input::{Event, History};
use super::outcome::{Drift, Entry, Failure};
use super::replay::describe;
use crate::allocator::check;
use crate::allocator::malloc::OutOfMemory;
use crate::allocator::sizes::round_size;
use crate::allocator::Device;
use crate::allocator::{Allocator, Change};
use rustc_hash::FxHashMap;

pub(super) struct Run<'h> {
    pub(super) h: &'h History,
    /// Recorded block address to replayed block address, for live blocks.
    pub(super) names: FxHashMap<u64, u64>,
    pub(super) trace: Vec<Entry>,
    pub(super) keep_trace: bool,
    pub(super) drift: Option<Drift>,
    pub(super) not_modelled: Option<Drift>,
    pub(super) failures: Vec<Failure>,
    pub(super) served: usize,
    /// Compare addresses with the recording.
    pub(super) checking: bool,
}

impl Run<'_> {
    /// Replays one request; whether the replay must stop.
    pub(super) fn step(
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
                    let free = dev.free_memory(oom.reserved);
                    self.fail(a, src, &oom, stream, false, free);
                    true
                }
            },
            Event::Oom {
                size,
                stream,
                device_free,
            } => match a.malloc(dev, size, stream) {
                Ok(id) => {
                    // The program got an error here and went on without the memory.
                    self.drain(a, src);
                    self.served += 1;
                    let addr = a.block(id).addr;
                    a.free(addr, false);
                    false
                }
                Err(oom) => {
                    let free = dev.free_memory(oom.reserved).or(device_free);
                    self.fail(a, src, &oom, stream, true, free);
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
        device_free: Option<u64>,
    ) {
        self.drain(a, src);
        self.entry("oom", 0, oom.requested, stream, src);
        if let Some(e) = self.trace.last_mut().filter(|e| e.action == "oom") {
            e.device_free = device_free;
        }
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
    pub(super) fn drain(&mut self, a: &mut Allocator, src: usize) {
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
                device_free: None,
            });
        }
    }

    pub(super) fn check_group_done(&mut self, recorded: &mut Recorded, src: usize) {
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
