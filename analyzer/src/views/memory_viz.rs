//! Any run as a PyTorch memory snapshot, so that pytorch.org/memory_viz opens the traces of
//! any program: device allocations become segments, allocator annotations become the
//! blocks inside them (without annotations, each allocation is one block filling its
//! segment), and the most recent events become the snapshot's trace entries.

use super::layer::Layer;
use crate::model::Map;
use crate::replay::{Run, Step};
use crate::snapshot::model::{
    Action, Annotation, Block, BlockState, Frame, Segment, Snapshot, TraceEntry,
};
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

/// An entry before its frames are known (stacks are complete once the run is read). Every
/// event of the run passes through one, and up to `max_entries` per device are held: it
/// is kept small and plain, and becomes a [`TraceEntry`] only if it is kept to the end.
#[derive(Clone, Copy)]
struct Pending {
    action: EntryAction,
    addr: u64,
    size: u64,
    stream: u64,
    time_us: i64,
    process: usize,
    stack: u64,
    /// For an `oom` entry, the process's failure it is (where the model kept it): its
    /// `device_free` is the driver's figure at it, by the rule every view uses, once the
    /// run is read (the hook's figures join after the replay).
    failure: Option<usize>,
    /// A segment's block, written while its process has annotated none: left out at the
    /// end if it annotates blocks later (a traced PyTorch run reserves its first segment
    /// before it annotates its first block).
    as_block: bool,
}

/// The actions of the entries this export writes.
#[derive(Clone, Copy)]
enum EntryAction {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    Oom,
}

impl EntryAction {
    fn action(self) -> Action {
        match self {
            EntryAction::Alloc => Action::Alloc,
            EntryAction::FreeRequested => Action::FreeRequested,
            EntryAction::FreeCompleted => Action::FreeCompleted,
            EntryAction::SegmentAlloc => Action::SegmentAlloc,
            EntryAction::SegmentFree => Action::SegmentFree,
            EntryAction::Oom => Action::Oom,
        }
    }
}

/// One device's newest entries, and how many older ones were left out.
struct DeviceTrace {
    dev: i32,
    entries: VecDeque<Pending>,
    dropped: u64,
}

pub struct MemoryVizBuilder {
    /// 0: no limit.
    max_entries: usize,
    /// Device allocations (segments) and annotated blocks, per process, by address.
    segments: Vec<Map<u64, Live>>,
    blocks: Vec<Map<u64, Live>>,
    annotated: Vec<bool>,
    /// Per device, by the index in `traces` of its ordinal; `last` is the device of the
    /// previous entry, which the next one mostly shares.
    traces: Vec<DeviceTrace>,
    trace_index: Map<i32, usize>,
    last: Option<(i32, usize)>,
    /// `--layer reserved`: annotated blocks are left out, every allocation is one block.
    reserved_only: bool,
    /// The run's markers as `external_annotations` (`NAME` starts a range, `/NAME` ends
    /// it), the first [`MOST_ANNOTATIONS`]; and how many past them were left out.
    annotations: Vec<Annotation>,
    pub annotations_left_out: u64,
}

/// Annotations written at most, as many as the snapshot reader reads.
const MOST_ANNOTATIONS: usize = 100_000;

impl MemoryVizBuilder {
    pub fn new(max_entries: usize) -> Self {
        MemoryVizBuilder {
            max_entries,
            segments: Vec::new(),
            blocks: Vec::new(),
            annotated: Vec::new(),
            traces: Vec::new(),
            trace_index: Map::default(),
            last: None,
            reserved_only: false,
            annotations: Vec::new(),
            annotations_left_out: 0,
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

    /// The index in `traces` of device `dev`'s, added if new.
    fn trace_of(&mut self, dev: i32) -> usize {
        if let Some((at, i)) = self.last {
            if at == dev {
                return i;
            }
        }
        let next = self.traces.len();
        let i = *self.trace_index.entry(dev).or_insert(next);
        if i == next {
            self.traces.push(DeviceTrace {
                dev,
                entries: VecDeque::new(),
                dropped: 0,
            });
        }
        self.last = Some((dev, i));
        i
    }

    fn push(&mut self, dev: i32, entry: Pending) {
        let i = self.trace_of(dev);
        let trace = &mut self.traces[i];
        if self.max_entries > 0 && trace.entries.len() == self.max_entries {
            trace.entries.pop_front();
            trace.dropped += 1;
        }
        trace.entries.push_back(entry);
    }

    /// A free as the viewer shows one: requested, then completed.
    fn push_free(&mut self, dev: i32, entry: impl Fn(EntryAction) -> Pending) {
        for action in [EntryAction::FreeRequested, EntryAction::FreeCompleted] {
            self.push(dev, entry(action));
        }
    }

    /// Per device, in ordinal order: (device, entries kept, entries left out).
    pub fn entry_counts(&self) -> Vec<(i32, usize, u64)> {
        let mut out: Vec<(i32, usize, u64)> = self
            .traces
            .iter()
            .map(|t| {
                let written = t.entries.iter();
                let written = written.filter(|e| !(e.as_block && self.annotated[e.process]));
                (t.dev, written.count(), t.dropped)
            })
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
        let time_us = (s.model.header.start_unix_ns.saturating_add(e.t) / 1000) as i64;
        let entry = |action: EntryAction, addr: u64, size: u64, stack: u64| Pending {
            action,
            addr,
            size,
            stream: e.stream.unwrap_or(0),
            time_us,
            process: p,
            stack,
            failure: None,
            as_block: false,
        };
        let device_memory = e.kind().is_device_memory();
        match e.api.op() {
            Op::Alloc if device_memory && !e.ok() => {
                let kept = s.model.failures.len() as u64 == s.model.counts.failed_allocations;
                let oom = Pending {
                    failure: kept.then(|| s.model.failures.len() - 1),
                    ..entry(EntryAction::Oom, 0, e.size, e.stack)
                };
                self.push(e.dev, oom);
            }
            Op::Alloc if device_memory => {
                let live = Live {
                    size: e.size,
                    dev: e.dev,
                    stack: e.stack,
                };
                self.segments[p].insert(e.addr, live);
                let segment = entry(EntryAction::SegmentAlloc, e.addr, e.size, e.stack);
                self.push(e.dev, segment);
                if !self.annotated[p] {
                    let block = Pending {
                        as_block: true,
                        ..entry(EntryAction::Alloc, e.addr, e.size, e.stack)
                    };
                    self.push(e.dev, block);
                }
            }
            Op::Free if e.ok() => {
                if let Some(seg) = self.segments[p].remove(&e.addr) {
                    if !self.annotated[p] {
                        self.push_free(seg.dev, |a| Pending {
                            as_block: true,
                            ..entry(a, e.addr, seg.size, seg.stack)
                        });
                    }
                    let segment = entry(EntryAction::SegmentFree, e.addr, seg.size, e.stack);
                    self.push(seg.dev, segment);
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
                self.push(e.dev, entry(EntryAction::Alloc, e.addr, e.size, e.stack));
            }
            Op::Marker => {
                let Some(name) = e.handle.and_then(|h| s.model.names.get(&h)) else {
                    return;
                };
                // A category range says what the tensors were for, not a phase.
                if crate::model::names_a_range(name) {
                    return;
                }
                if self.annotations.len() == MOST_ANNOTATIONS {
                    self.annotations_left_out += 1;
                    return;
                }
                let (start, name) = match name.strip_prefix('/') {
                    Some(n) => (false, n),
                    None => (true, name.as_str()),
                };
                self.annotations.push(Annotation {
                    start,
                    name: name.to_string(),
                    device: e.dev.max(0) as i64,
                    time_us,
                });
            }
            Op::BlockFree if !self.reserved_only => {
                if let Some(b) = self.blocks[p].remove(&e.addr) {
                    self.push_free(b.dev, |a| entry(a, e.addr, b.size, b.stack));
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
                // A snapshot names a segment's private pool through its tensors' labels.
                let pool = blocks[blocks.partition_point(|b| *b.0 < addr)..]
                    .iter()
                    .take_while(|(&a, _)| a < end)
                    .find_map(|(_, b)| run.processes.get(p)?.categories.labels.get(&b.stack)?.pool);
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
                        segment_pool_id: pool,
                        frames: frames_of(p, seg.stack).into(),
                        blocks: with_free_gaps(addr, seg.size, inside),
                    },
                ));
            }
        }
        let annotated = &self.annotated;
        let traces = self
            .traces
            .into_iter()
            .map(|t| {
                let entries = t
                    .entries
                    .into_iter()
                    .filter(|e| !(e.as_block && annotated[e.process]))
                    .flat_map(|pending| {
                        let entry = TraceEntry {
                            action: pending.action.action(),
                            addr: pending.addr,
                            size: pending.size,
                            stream: pending.stream,
                            time_us: Some(pending.time_us),
                            device_free: pending
                                .failure
                                .and_then(|k| run.processes.get(pending.process)?.failures.get(k))
                                .and_then(|f| f.driver_at_failure())
                                .map(|d| d.free),
                            frames: frames_of(pending.process, pending.stack).into(),
                            extra: user_metadata(run, &pending),
                        };
                        let notes = annotations(run, &entry, &pending);
                        std::iter::once(entry).chain(notes)
                    })
                    .collect();
                (t.dev as i64, entries)
            })
            .collect::<Vec<_>>();
        let mut snap = Snapshot::from_segments(segments, traces);
        snap.external_annotations = phases(self.annotations);
        snap
    }
}

/// The `user_metadata` a snapshot's tensor was allocated under, for its `alloc` entry.
fn user_metadata(run: &Run, e: &Pending) -> serde_json::Map<String, serde_json::Value> {
    let mut extra = serde_json::Map::new();
    if !matches!(e.action, EntryAction::Alloc) {
        return extra;
    }
    let label = run
        .processes
        .get(e.process)
        .and_then(|m| m.categories.labels.get(&e.stack));
    if let Some(m) = label.and_then(|l| l.user_metadata.clone()) {
        extra.insert(
            "user_metadata".into(),
            serde_json::to_value(m).unwrap_or_default(),
        );
    }
    extra
}

/// A snapshot's annotations of the tensor `alloc` makes (`_annotate_tensor`), as
/// `annotate` entries right after it: the label keeps what they said, not when.
fn annotations(run: &Run, alloc: &TraceEntry, e: &Pending) -> Vec<TraceEntry> {
    if !matches!(e.action, EntryAction::Alloc) {
        return Vec::new();
    }
    let Some(label) = run
        .processes
        .get(e.process)
        .and_then(|m| m.categories.labels.get(&e.stack))
    else {
        return Vec::new();
    };
    label
        .annotations
        .iter()
        .map(|a| {
            let mut extra = serde_json::Map::new();
            extra.insert(
                "user_metadata".into(),
                serde_json::to_value(a).unwrap_or_default(),
            );
            TraceEntry {
                action: Action::Other(crate::snapshot::labels::ANNOTATE.into()),
                size: 0,
                device_free: None,
                extra,
                ..alloc.clone()
            }
        })
        .collect()
}

/// The ranges of `marks` that end, each its START and END in order: a marker without its
/// end is a point of the run, which annotations cannot say.
fn phases(marks: Vec<Annotation>) -> Vec<Annotation> {
    let mut open: Map<(i64, &str), Vec<usize>> = Map::default();
    let mut kept = vec![false; marks.len()];
    for (i, a) in marks.iter().enumerate() {
        let starts = open.entry((a.device, a.name.as_str())).or_default();
        if a.start {
            starts.push(i);
        } else if let Some(s) = starts.pop() {
            kept[s] = true;
            kept[i] = true;
        }
    }
    drop(open);
    marks
        .into_iter()
        .zip(kept)
        .filter_map(|(a, k)| k.then_some(a))
        .collect()
}

fn block(address: u64, size: u64, state: BlockState, frames: Vec<Frame>) -> Block {
    Block {
        address,
        size,
        requested_size: None,
        state,
        frames: frames.into(),
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
