//! A PyTorch snapshot as the events of a trace, so that it feeds the same replay model as
//! a trace and every view reads it: segments are the reserved layer (`cudaMalloc`,
//! `cudaFree`), tensors the allocated layer (block annotations, with the stack of the
//! allocation), each `oom` entry a failed `cudaMalloc` followed by the driver's free bytes.
//!
//! The history is a window (the `max_entries` ring buffer, or recording that began late):
//! what was alive before it is rebuilt from the final segments and blocks, rewound through
//! the history (an `alloc` undone removes a tensor, a `free_completed` undone brings one
//! back), and handed out first, at the window's first time. So views see absolute memory,
//! not memory relative to the window's start. A tensor counts from its `alloc` to its
//! `free_completed`, as memory_viz's Active Memory Timeline counts it, by its requested
//! size; its block size is the final segments' where they hold it, else read off the
//! segments' layout at its `alloc` ([`super::block_sizes`]), else 0 (unknown).

use super::block_sizes::Layout;
use super::frames::readable;
use super::model::{Action, BlockState, DeviceSnapshot, Frame, Snapshot};
use crate::model::Map;
use std::path::Path;
use vramtrace_schema::{Api, End, Event, Header, Node, Settings, StackTable};

/// `cudaErrorMemoryAllocation`: what the caching allocator's `cudaMalloc` got.
const OUT_OF_MEMORY: i32 = 2;

/// Where the frame addresses and stack ids of a snapshot joining a trace begin: a trace's
/// node ids count up from 1, its native addresses are user-space ones (below 2^47) and its
/// Python frames' synthetic addresses have bit 63 set, so none lies in [2^62, 2^63).
pub const BESIDE_IDS: u64 = 1 << 62;

/// A snapshot's events in time order, with the stacks they point at.
pub struct SnapshotEvents {
    pub header: Header,
    pub stacks: StackTable,
    /// Where the history and the final segments disagree, or the history says it is cut.
    pub notes: Vec<String>,
    events: std::vec::IntoIter<Event>,
    count: u64,
    last_t: u64,
}

impl SnapshotEvents {
    /// Reads the snapshot at `path`. The error names the file.
    pub fn open(path: &Path, all_frames: bool) -> Result<SnapshotEvents, String> {
        let snap = super::read::read_snapshot(path)?;
        Ok(SnapshotEvents::new(path, &snap, all_frames))
    }

    /// Reads the snapshot at `path` to join the trace of the process that wrote it: its
    /// frame addresses and stack ids start at [`BESIDE_IDS`], clear of the trace's own.
    pub fn open_beside(path: &Path, all_frames: bool) -> Result<SnapshotEvents, String> {
        let snap = super::read::read_snapshot(path)?;
        Ok(SnapshotEvents::build(path, &snap, all_frames, BESIDE_IDS))
    }

    pub fn new(path: &Path, snap: &Snapshot, all_frames: bool) -> SnapshotEvents {
        SnapshotEvents::build(path, snap, all_frames, 0)
    }

    fn build(path: &Path, snap: &Snapshot, all_frames: bool, base: u64) -> SnapshotEvents {
        let origin_us = snap
            .devices
            .iter()
            .flat_map(|d| d.trace.iter().filter_map(|e| e.time_us))
            .min();
        let mut b = Builder {
            base,
            stacks: StackTable::default(),
            frames: Map::default(),
            nodes: Map::default(),
            all_frames,
            events: Vec::new(),
            notes: Vec::new(),
            origin_us: origin_us.unwrap_or(0),
        };
        let expandable = snap
            .devices
            .iter()
            .flat_map(|d| &d.segments)
            .any(|s| s.is_expandable);
        for d in &snap.devices {
            let layout = Layout::new(snap.allocator_settings.as_ref(), expandable);
            b.device(path, d, layout);
        }
        // Devices are merged by time; within a time, each device's order is kept.
        b.events.sort_by_key(|e| e.t);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let header = Header {
            format: vramtrace_schema::FORMAT_NAME.into(),
            version: vramtrace_schema::FORMAT_VERSION,
            pid: name.as_deref().and_then(pid_of).unwrap_or(0),
            ppid: 0,
            // Each snapshot is its own "host": its device ordinals are its own, and its
            // clock is the wall clock (`time_us`).
            host: name.clone().unwrap_or_default(),
            argv: Vec::new(),
            exe: path.display().to_string(),
            start_unix_ns: origin_us.map_or(0, |us| us.max(0) as u64 * 1000),
            start_mono_ns: 0,
            env: name
                .as_deref()
                .and_then(crate::views::ranks::rank_in_name)
                .map(|r| ("RANK".to_string(), r))
                .into_iter()
                .collect(),
            settings: Settings {
                output: String::new(),
                children: false,
                flush_ms: 0,
                stack_depth: 0,
                python: true,
            },
            interposer: "pytorch-snapshot".into(),
        };
        let last_t = b.events.last().map_or(0, |e| e.t);
        SnapshotEvents {
            header,
            stacks: b.stacks,
            notes: b.notes,
            count: 0,
            last_t,
            events: b.events.into_iter(),
        }
    }

    pub fn next_event(&mut self) -> Option<Event> {
        let e = self.events.next()?;
        self.count += 1;
        Some(e)
    }

    /// The segments the history saw allocated (`segment_alloc`, `segment_map`), not yet
    /// read: (address, size, time). Those alive before the history are not among them
    /// (their time is the history's start, not theirs).
    pub fn segments_ahead(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.events
            .as_slice()
            .iter()
            .filter(|e| e.api == Api::CudaMalloc && e.ok() && e.stream.is_some())
            .map(|e| (e.addr, e.size, e.t))
    }

    /// The end record a snapshot stands for: it was written whole.
    pub fn end(&self) -> End {
        End {
            t: self.last_t,
            events: self.count,
            reason: "snapshot".into(),
            queue_peak_bytes: None,
        }
    }
}

/// `torch-snapshot-HOST-PID...pickle` (the PyTorch hook's name; older hooks left out
/// `HOST-`) -> PID.
fn pid_of(name: &str) -> Option<u32> {
    crate::views::snapshots_beside::writer(name).map(|(_, pid)| pid)
}

/// A tensor alive before the window: its sizes and allocation stack.
#[derive(Clone, Copy)]
struct Alive {
    size: u64,
    requested: u64,
    stack: u64,
    /// Known from its `free_completed` only: allocated before the history.
    freed_inside: bool,
}

struct Builder {
    /// Added to every frame address and stack id: 0 for a snapshot of its own,
    /// [`BESIDE_IDS`] for one joining its process's trace.
    base: u64,
    stacks: StackTable,
    frames: Map<(String, i64, String), u64>,
    nodes: Map<(u64, u64), u64>,
    all_frames: bool,
    events: Vec<Event>,
    notes: Vec<String>,
    origin_us: i64,
}

impl Builder {
    /// The stack id of `frames` (innermost first), reduced to what a person reads.
    fn stack(&mut self, frames: &[Frame]) -> u64 {
        let shown = readable(frames, self.all_frames);
        let mut node = 0;
        for r in shown.iter().rev() {
            let key = (
                r.filename.unwrap_or("").to_string(),
                r.line,
                r.name.to_string(),
            );
            let next_ip = self.base + self.frames.len() as u64 + 1;
            let ip = *self.frames.entry(key).or_insert_with(|| {
                self.stacks.add_frame(vramtrace_schema::Frame {
                    ip: next_ip,
                    module: if r.python { "python" } else { "operator" }.into(),
                    offset: 0,
                    function: Some(r.name.to_string()),
                    file: r.filename.map(str::to_string),
                    line: u32::try_from(r.line).ok(),
                    inlined: Vec::new(),
                });
                next_ip
            });
            let next_id = self.base + self.nodes.len() as u64 + 1;
            node = *self.nodes.entry((node, ip)).or_insert_with(|| {
                self.stacks.add_node(Node {
                    id: next_id,
                    parent: node,
                    ip,
                });
                next_id
            });
        }
        node
    }

    fn device(&mut self, path: &Path, d: &DeviceSnapshot, mut layout: Layout) {
        let dev = d.device as i32;
        // The final state.
        let mut segments: Map<u64, u64> = Map::default();
        let mut alive: Map<u64, Alive> = Map::default();
        for s in &d.segments {
            segments.insert(s.address, s.total_size);
            for b in s.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                let stack = self.stack(&b.frames);
                alive.insert(
                    b.address,
                    Alive {
                        size: b.size,
                        requested: b.requested_size.unwrap_or(b.size),
                        stack,
                        freed_inside: false,
                    },
                );
            }
        }
        // Rewound through the history: block sizes of the allocations still alive at the
        // end, and what was alive before the first entry.
        let mut sizes = vec![0u64; d.trace.len()];
        let mut disagree = 0u64;
        for (i, e) in d.trace.iter().enumerate().rev() {
            match e.action {
                Action::SegmentAlloc | Action::SegmentMap => {
                    disagree += segments.remove(&e.addr).is_none() as u64;
                }
                Action::SegmentFree | Action::SegmentUnmap => {
                    segments.insert(e.addr, e.size);
                }
                Action::Alloc => match alive.remove(&e.addr) {
                    Some(a) => sizes[i] = a.size,
                    None => disagree += 1,
                },
                Action::FreeCompleted => {
                    // Allocated before the window: who allocated it is not known.
                    alive.insert(
                        e.addr,
                        Alive {
                            size: 0,
                            requested: e.size,
                            stack: 0,
                            freed_inside: true,
                        },
                    );
                }
                _ => {}
            }
        }
        if disagree > 0 {
            self.notes.push(format!(
                "note: {}: device {}: {} history entries do not match the final segments (the file was edited, or entries were dropped)",
                path.display(),
                d.device,
                disagree
            ));
        }
        let alive_before = !segments.is_empty() || !alive.is_empty();
        if !d.trace.is_empty() && alive_before {
            // A ring buffer that wrapped, or recording turned on late: the views still
            // count what was alive before, from the final segments.
            let unknown = alive.values().filter(|a| a.freed_inside).count();
            self.notes.push(format!(
                "note: {}: device {}: the history does not reach back to the start: {} and {} were alive before its first entry ({} of them freed inside it, with no stack)",
                path.display(),
                d.device,
                crate::units::count(segments.len() as u64, "segment"),
                crate::units::count(alive.len() as u64, "tensor"),
                unknown
            ));
        }
        // Block sizes the history does not give: from the layout of the segments then.
        for (&addr, &size) in &segments {
            layout.segment_alloc(addr, size);
        }
        for &addr in alive.keys() {
            layout.taken(addr);
        }
        for (&addr, a) in alive.iter_mut().filter(|(_, a)| a.size == 0) {
            a.size = layout.before_history(addr, a.requested);
        }
        let first = d.trace.iter().find_map(|e| e.time_us);
        let start = self.time(first.unwrap_or(self.origin_us));
        let mut before: Vec<(u64, u64)> = segments.into_iter().collect();
        before.sort_unstable();
        for (addr, size) in before {
            let mut e = Event::new(start, 0, dev, Api::CudaMalloc, 0);
            e.addr = addr;
            e.size = size;
            self.events.push(e);
        }
        let mut tensors: Vec<(u64, Alive)> = alive.into_iter().collect();
        tensors.sort_unstable_by_key(|t| t.0);
        for (addr, a) in tensors {
            self.events
                .push(block_alloc(start, dev, addr, a.size, a.requested, a.stack));
        }
        let mut t = start;
        for (i, e) in d.trace.iter().enumerate() {
            if let Some(us) = e.time_us {
                t = t.max(self.time(us));
            }
            let stream = Some(e.stream);
            match e.action {
                Action::SegmentAlloc | Action::SegmentMap => {
                    layout.segment_alloc(e.addr, e.size);
                    let mut ev = Event::new(t, 0, dev, Api::CudaMalloc, 0);
                    ev.addr = e.addr;
                    ev.size = e.size;
                    ev.stream = stream;
                    self.events.push(ev);
                }
                Action::SegmentFree | Action::SegmentUnmap => {
                    layout.segment_free(e.addr);
                    let mut ev = Event::new(t, 0, dev, Api::CudaFree, 0);
                    ev.addr = e.addr;
                    self.events.push(ev);
                }
                Action::Alloc => {
                    let stack = self.stack(&e.frames);
                    let inferred = layout.alloc(e.addr, e.size);
                    let size = if sizes[i] > 0 { sizes[i] } else { inferred };
                    let mut ev = block_alloc(t, dev, e.addr, size, e.size, stack);
                    ev.stream = stream;
                    self.events.push(ev);
                }
                Action::FreeCompleted => {
                    layout.free(e.addr);
                    let mut ev = Event::new(t, 0, dev, Api::VramtraceBlockFree, 0);
                    ev.addr = e.addr;
                    self.events.push(ev);
                }
                Action::Oom => {
                    let mut ev = Event::new(t, 0, dev, Api::CudaMalloc, OUT_OF_MEMORY);
                    ev.size = e.size;
                    ev.stream = stream;
                    ev.stack = self.stack(&e.frames);
                    self.events.push(ev);
                    if let Some(free) = e.device_free {
                        let mut probe = Event::new(t, 0, dev, Api::ProbeMeminfo, 0);
                        probe.free = Some(free);
                        self.events.push(probe);
                    }
                }
                _ => {}
            }
        }
    }

    /// Epoch microseconds as ns since the snapshot's first entry.
    fn time(&self, us: i64) -> u64 {
        (us.saturating_sub(self.origin_us)).max(0) as u64 * 1000
    }
}

fn block_alloc(t: u64, dev: i32, addr: u64, size: u64, requested: u64, stack: u64) -> Event {
    let mut e = Event::new(t, 0, dev, Api::VramtraceBlockAlloc, 0);
    e.addr = addr;
    e.size = size;
    e.requested = Some(requested);
    e.stack = stack;
    e
}
