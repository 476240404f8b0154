//! Any run as a PyTorch memory snapshot, so that pytorch.org/memory_viz opens the traces of
//! any program: device allocations become segments, allocator annotations become the
//! blocks inside them (without annotations, each allocation is one block filling its
//! segment), and the most recent events become the snapshot's trace entries.

use crate::model::Map;
use crate::run::{Run, Step};
use crate::snapshot::model::{Action, Block, BlockState, Frame, Segment, Snapshot, TraceEntry};
use crate::views::stacks;
use std::collections::VecDeque;
use std::sync::Arc;
use vramtrace_schema::{Api, Op};

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
        let device_memory = e.api.kind().is_device_memory();
        match e.api.op() {
            Op::Alloc if device_memory && !e.ok() => {
                let mut oom = entry(Action::Oom, 0, e.size);
                oom.device_free = s.model.last_meminfo.map(|m| m.0);
                self.push(e.dev, p, e.stack, oom);
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
            Op::Meminfo if e.api == Api::ProbeMeminfo && e.ok() => {
                // The driver's figure at a failure is the one asked right after it (as
                // the model keeps it), not the program's last answer, maybe from long
                // before.
                let last = self.entries.get_mut(&e.dev).and_then(|q| q.back_mut());
                if let Some(last) = last.filter(|l| l.process == p) {
                    if last.entry.action == Action::Oom && e.free.is_some() {
                        last.entry.device_free = e.free;
                    }
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
            Op::BlockAlloc => {
                self.annotated[p] = true;
                let live = Live {
                    size: e.size,
                    dev: e.dev,
                    stack: e.stack,
                };
                self.blocks[p].insert(e.addr, live);
                self.push(e.dev, p, e.stack, entry(Action::Alloc, e.addr, e.size));
            }
            Op::BlockFree => {
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
