//! Any run as a PyTorch memory snapshot, so that pytorch.org/memory_viz opens the traces of
//! any program: device allocations become segments, allocator annotations become the
//! blocks inside them (without annotations, each allocation is one block filling its
//! segment), and the most recent events become the snapshot's trace entries.

use super::layer::Layer;
use crate::model::Map;
use crate::run::{Run, Step};
use crate::snapshot::model::{Action, Block, BlockState, Frame, Segment, Snapshot, TraceEntry};
use crate::views::stacks;
use std::collections::VecDeque;
use std::sync::Arc;
use vramtrace_schema::Op;

/// Trace entries kept per device, as PyTorch's `max_entries`: the newest win. The
/// browser viewer slows down and then fails as a history grows (pytorch#158364).
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

struct Live {
    size: u64,
    dev: i32,
    stack: u64,
}

/// An entry before its frames are known (stacks are complete once the run is read).
struct Pending {
    entry: TraceEntry,
    process: usize,
    stack: u64,
    /// For an `oom` entry, the process's failure it is (where the model kept it): its
    /// `device_free` is the driver's figure at it, by the rule every view uses, once the
    /// run is read (the hook's figures join after the replay).
    failure: Option<usize>,
}

pub struct MemoryVizBuilder {
    /// 0: no limit.
    max_entries: usize,
    /// Entries left out per device (the oldest).
    dropped: Map<i32, u64>,
    /// Device allocations (segments) and annotated blocks, per process, by address.
    segments: Vec<Map<u64, Live>>,
    blocks: Vec<Map<u64, Live>>,
    annotated: Vec<bool>,
    entries: Map<i32, VecDeque<Pending>>,
    /// `--layer reserved`: annotated blocks are left out, every allocation is one block.
    reserved_only: bool,
}

impl MemoryVizBuilder {
    pub fn new(max_entries: usize) -> Self {
        MemoryVizBuilder {
            max_entries,
            dropped: Map::default(),
            segments: Vec::new(),
            blocks: Vec::new(),
            annotated: Vec::new(),
            entries: Map::default(),
            reserved_only: false,
        }
    }

    /// A builder at `layer`: the allocated layer's blocks where the run has them (the
    /// default), or, for the reserved layer, each allocation as one block.
    pub fn at_layer(max_entries: usize, layer: Layer) -> Self {
        MemoryVizBuilder {
            reserved_only: layer == Layer::Reserved,
            ..MemoryVizBuilder::new(max_entries)
        }
    }

    fn push(&mut self, dev: i32, process: usize, stack: u64, entry: TraceEntry) {
        let q = self.entries.entry(dev).or_default();
        if self.max_entries > 0 && q.len() == self.max_entries {
            q.pop_front();
            *self.dropped.entry(dev).or_default() += 1;
        }
        q.push_back(Pending {
            entry,
            process,
            stack,
            failure: None,
        });
    }

    /// A free as the viewer shows one: requested, then completed.
    fn push_free(
        &mut self,
        dev: i32,
        process: usize,
        stack: u64,
        entry: impl Fn(Action) -> TraceEntry,
    ) {
        for action in [Action::FreeRequested, Action::FreeCompleted] {
            self.push(dev, process, stack, entry(action));
        }
    }

    /// Per device, in ordinal order: (device, entries kept, entries left out).
    pub fn entry_counts(&self) -> Vec<(i32, usize, u64)> {
        let mut out: Vec<(i32, usize, u64)> = self
            .entries
            .iter()
            .map(|(&dev, q)| (dev, q.len(), self.dropped.get(&dev).copied().unwrap_or(0)))
            .collect();
        out.sort_unstable();
        out
    }

    pub fn step(&mut self, s: &Step) {
        // A process's end is no event of the allocator's: its segments stay as it left them.
        if s.ended {
            return;
        }
        let p = s.process;
        if self.segments.len() <= p {
            self.segments.resize_with(p + 1, Map::default);
            self.blocks.resize_with(p + 1, Map::default);
            self.annotated.resize(p + 1, false);
        }
        let e = s.event;
        let time_us = Some((s.model.header.start_unix_ns.saturating_add(e.t) / 1000) as i64);
        let entry = |action: Action, addr: u64, size: u64| TraceEntry {
            action,
            addr,
            size,
            stream: e.stream.unwrap_or(0),
            time_us,
            device_free: None,
            extra: Default::default(),
            frames: Vec::new(),
        };
        let device_memory = e.kind().is_device_memory();
        match e.api.op() {
            Op::Alloc if device_memory && !e.ok() => {
                self.push(e.dev, p, e.stack, entry(Action::Oom, 0, e.size));
                let kept = s.model.failures.len() as u64 == s.model.counts.failed_allocations;
                if let Some(last) = self.entries.get_mut(&e.dev).and_then(|q| q.back_mut()) {
                    last.failure = kept.then(|| s.model.failures.len() - 1);
                }
            }
            Op::Alloc if device_memory => {
                let live = Live {
                    size: e.size,
                    dev: e.dev,
                    stack: e.stack,
                };
                self.segments[p].insert(e.addr, live);
                self.push(
                    e.dev,
                    p,
                    e.stack,
                    entry(Action::SegmentAlloc, e.addr, e.size),
                );
                if !self.annotated[p] {
                    self.push(e.dev, p, e.stack, entry(Action::Alloc, e.addr, e.size));
                }
            }
            Op::Free if e.ok() => {
                if let Some(seg) = self.segments[p].remove(&e.addr) {
                    if !self.annotated[p] {
                        self.push_free(seg.dev, p, seg.stack, |a| entry(a, e.addr, seg.size));
                    }
                    self.push(
                        seg.dev,
                        p,
                        e.stack,
                        entry(Action::SegmentFree, e.addr, seg.size),
                    );
                }
            }
            Op::BlockAlloc if !self.reserved_only => {
                self.annotated[p] = true;
                let live = Live {
                    size: e.size,
                    dev: e.dev,
                    stack: e.stack,
                };
                self.blocks[p].insert(e.addr, live);
                self.push(e.dev, p, e.stack, entry(Action::Alloc, e.addr, e.size));
            }
            Op::BlockFree if !self.reserved_only => {
                if let Some(b) = self.blocks[p].remove(&e.addr) {
                    self.push_free(b.dev, p, b.stack, |a| entry(a, e.addr, b.size));
                }
            }
            _ => {}
        }
    }

    /// The snapshot at the end of the run.
    pub fn finish(self, run: &Run) -> Snapshot {
        let mut frames: Map<(usize, u64), Vec<Frame>> = Map::default();
        let mut frames_of = |process: usize, stack: u64| -> Vec<Frame> {
            frames
                .entry((process, stack))
                .or_insert_with(|| {
                    let Some(model) = run.processes.get(process) else {
                        return Vec::new();
                    };
                    stacks::shown(&model.stacks, stack)
                        .into_iter()
                        .map(|f| Frame {
                            filename: Arc::from(f.file.clone().unwrap_or_else(|| f.module.clone())),
                            line: f.line.unwrap_or(0) as i64,
                            name: Arc::from(f.function.clone().unwrap_or_else(|| "??".into())),
                        })
                        .collect()
                })
                .clone()
        };
        let mut segments = Vec::new();
        for (p, live) in self.segments.iter().enumerate() {
            let mut blocks: Vec<(&u64, &Live)> = self.blocks[p].iter().collect();
            blocks.sort_by_key(|b| *b.0);
            for (&addr, seg) in live {
                let end = addr.saturating_add(seg.size);
                let inside: Vec<Block> = if self.annotated[p] {
                    blocks[blocks.partition_point(|b| *b.0 < addr)..]
                        .iter()
                        .take_while(|(&a, _)| a < end)
                        .map(|(&a, b)| {
                            block(
                                a,
                                b.size,
                                BlockState::ActiveAllocated,
                                frames_of(p, b.stack),
                            )
                        })
                        .collect()
                } else {
                    vec![block(
                        addr,
                        seg.size,
                        BlockState::ActiveAllocated,
                        frames_of(p, seg.stack),
                    )]
                };
                segments.push((
                    seg.dev as i64,
                    Segment {
                        address: addr,
                        total_size: seg.size,
                        stream: 0,
                        segment_type: if seg.size <= 2 << 20 {
                            "small"
                        } else {
                            "large"
                        }
                        .into(),
                        is_expandable: false,
                        segment_pool_id: None,
                        frames: frames_of(p, seg.stack),
                        blocks: with_free_gaps(addr, seg.size, inside),
                    },
                ));
            }
        }
        let traces = self
            .entries
            .into_iter()
            .map(|(dev, q)| {
                let entries = q
                    .into_iter()
                    .map(|pending| TraceEntry {
                        frames: frames_of(pending.process, pending.stack),
                        device_free: pending
                            .failure
                            .and_then(|k| run.processes.get(pending.process)?.failures.get(k))
                            .and_then(|f| f.driver_at_failure())
                            .map(|d| d.free),
                        ..pending.entry
                    })
                    .collect();
                (dev as i64, entries)
            })
            .collect::<Vec<_>>();
        Snapshot::from_segments(segments, traces)
    }
}

fn block(address: u64, size: u64, state: BlockState, frames: Vec<Frame>) -> Block {
    Block {
        address,
        size,
        requested_size: None,
        state,
        frames,
    }
}

/// The segment's blocks (given in address order), with the space between them as inactive
/// blocks (what the viewer draws as cached, free memory).
fn with_free_gaps(start: u64, size: u64, blocks: Vec<Block>) -> Vec<Block> {
    let mut out = Vec::with_capacity(blocks.len() * 2 + 1);
    let mut at = start;
    for b in blocks {
        if b.address > at {
            out.push(block(at, b.address - at, BlockState::Inactive, Vec::new()));
        }
        at = at.max(b.address.saturating_add(b.size));
        out.push(b);
    }
    let end = start.saturating_add(size);
    if end > at {
        out.push(block(at, end - at, BlockState::Inactive, Vec::new()));
    }
    out
}
