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
//!
//! The history is streamed from the decoded pickle (`history.rs`), never copied into the
//! snapshot model: each device is a cursor that turns its next entry into events when
//! the replay asks, and the devices are merged by time. A frame list becomes a stack once,
//! however many entries share it.

use super::block_sizes::Layout;
use super::frames::readable;
use super::history::{self, FrameReader, HistoryEntry};
use super::model::{Action, Frame, Snapshot};
use super::pickle::{Pickle, Value};
use super::rewind::{self, Alive, Rewound};
use crate::model::Map;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::Path;
use vramtrace_schema::{Api, End, Event, Header, Node, Settings, StackTable};

/// Where the frame addresses and stack ids of a snapshot joining a trace begin: a trace's
/// node ids count up from 1, its native addresses are user-space ones (below 2^47) and its
/// Python frames' synthetic addresses have bit 63 set, so none lies in [2^62, 2^63).
pub const BESIDE_IDS: u64 = 1 << 62;

/// The header's `interposer` of a snapshot read as a process: how views tell it from a
/// traced one.
pub const SNAPSHOT_INTERPOSER: &str = "pytorch-snapshot";

/// `cudaErrorMemoryAllocation`: what the caching allocator's `cudaMalloc` got.
const OUT_OF_MEMORY: i32 = 2;

/// A snapshot's events in time order, with the stacks they point at.
pub struct SnapshotEvents {
    pub header: Header,
    /// Where the history and the final segments disagree, or the history says it is cut.
    pub notes: Vec<String>,
    /// The flags by which the file says its history was cut short (empty: it does not).
    pub history_truncated: Vec<String>,
    pickle: Pickle,
    devices: Vec<Cursor>,
    builder: Builder,
    /// The time of the last event, known before the events are read.
    latest_t: u64,
    /// The devices whose next event is read, by its time then ordinal: (time, index).
    fronts: BinaryHeap<Reverse<(u64, usize)>>,
    started: bool,
}

/// One device's events: those alive before the history, then its entries in order.
struct Cursor {
    dev: i32,
    /// The device's list of entries in the pickle.
    list: Option<Value>,
    next: usize,
    /// The clock: entries without `time_us` keep the last time.
    t: u64,
    /// Block sizes of the allocations still alive at the end, by entry index, the next
    /// last (popped from the end as they are met).
    sizes: Vec<(usize, u64)>,
    /// The segments' layout as the history goes, for the block sizes the file leaves out.
    layout: Layout,
    pending: VecDeque<Event>,
}

impl SnapshotEvents {
    /// Reads the snapshot at `path`. The error names the file.
    pub fn open(path: &Path, all_frames: bool) -> Result<SnapshotEvents, String> {
        let pickle = super::read::read_pickle(path)?;
        SnapshotEvents::from_pickle(path, pickle, all_frames)
    }

    /// Reads the snapshot at `path` to join the trace of the process that wrote it: its
    /// frame addresses and stack ids start at [`BESIDE_IDS`], clear of the trace's own.
    pub fn open_beside(path: &Path, all_frames: bool) -> Result<SnapshotEvents, String> {
        let pickle = super::read::read_pickle(path)?;
        SnapshotEvents::build(path, pickle, all_frames, BESIDE_IDS)
    }

    /// The events of a decoded snapshot; `path` names it in notes and errors.
    pub fn from_pickle(
        path: &Path,
        pickle: Pickle,
        all_frames: bool,
    ) -> Result<SnapshotEvents, String> {
        SnapshotEvents::build(path, pickle, all_frames, 0)
    }

    fn build(
        path: &Path,
        pickle: Pickle,
        all_frames: bool,
        base: u64,
    ) -> Result<SnapshotEvents, String> {
        let at = |e: String| format!("{}: {e}", path.display());
        let snap = super::read::model_of(&pickle, false).map_err(at)?;
        let traces = history::device_traces(&pickle).map_err(at)?;
        let mut builder = Builder {
            base,
            stacks: StackTable::default(),
            frames: Map::default(),
            nodes: Map::default(),
            lists: Map::default(),
            reader: FrameReader::default(),
            all_frames,
            origin_us: 0,
        };
        // Each device's history rewound from its final state; every entry is read here, so
        // a malformed one refuses the file now.
        let mut rewound = Vec::new();
        for d in &snap.devices {
            let list = usize::try_from(d.device)
                .ok()
                .and_then(|i| traces.get(i).copied());
            let r = builder.rewind(&pickle, &snap, d.device, list).map_err(at)?;
            rewound.push((d.device, list, r));
        }
        let origin_us = rewound.iter().filter_map(|r| r.2.earliest_us).min();
        builder.origin_us = origin_us.unwrap_or(0);
        let latest_t = rewound
            .iter()
            .filter_map(|r| r.2.latest_us)
            .map(|us| builder.time(us))
            .max()
            .unwrap_or(0);
        let expandable = snap
            .devices
            .iter()
            .flat_map(|d| &d.segments)
            .any(|s| s.is_expandable);
        let layout = || Layout::new(snap.allocator_settings.as_ref(), expandable);
        let mut notes = Vec::new();
        if !snap.history_truncated.is_empty() {
            notes.push(format!(
                "note: {}: the snapshot says its history was truncated ({}): entries before it are missing, what they left alive is rebuilt from the final segments",
                path.display(),
                snap.history_truncated.join(", ")
            ));
        }
        let devices = rewound
            .into_iter()
            .map(|(device, list, r)| builder.cursor(path, device, list, r, layout(), &mut notes))
            .collect();
        let header = header(path, origin_us);
        Ok(SnapshotEvents {
            header,
            notes,
            history_truncated: snap.history_truncated.clone(),
            pickle,
            devices,
            builder,
            latest_t,
            fronts: BinaryHeap::new(),
            started: false,
        })
    }

    /// The segments the history allocates (`segment_alloc`, `segment_map`) and has not
    /// handed out yet, with a time: (address, size, time), in time order. Those alive
    /// before the history are not among them (their time is the history's start, not
    /// theirs).
    pub fn segments_ahead(&self) -> Vec<(u64, u64, u64)> {
        let mut out: Vec<(u64, u64, u64)> = self
            .devices
            .iter()
            .flat_map(|c| {
                entries(&self.pickle, c.list)
                    .get(c.next..)
                    .unwrap_or_default()
            })
            .filter_map(|&v| read(&self.pickle, v))
            .filter(|e| matches!(e.action, Action::SegmentAlloc | Action::SegmentMap))
            .filter_map(|e| Some((e.addr, e.size, self.builder.time(e.time_us?))))
            .collect();
        out.sort_by_key(|s| s.2);
        out
    }

    /// The next event in time order: devices merged by time, each device's order kept
    /// (the lower ordinal first at equal times). A heap of the devices' next events, so a
    /// file naming thousands of devices costs a logarithm per event, not a scan of them.
    pub fn next_event(&mut self) -> Option<Event> {
        if !self.started {
            self.started = true;
            for i in 0..self.devices.len() {
                self.refill(i);
            }
        }
        let Reverse((_, i)) = self.fronts.pop()?;
        let e = self.devices[i].pending.pop_front()?;
        self.refill(i);
        Some(e)
    }

    /// Reads device `i`'s next events, and puts it back among the fronts if it has one.
    fn refill(&mut self, i: usize) {
        let c = &mut self.devices[i];
        c.fill(&self.pickle, &mut self.builder);
        if let Some(e) = c.pending.front() {
            self.fronts.push(Reverse((e.t, i)));
        }
    }

    /// The stacks the events read so far point at (all of them once `next_event` has
    /// returned `None`), taken.
    pub fn take_stacks(&mut self) -> StackTable {
        std::mem::take(&mut self.builder.stacks)
    }

    /// History entries in all, over the devices (before the first `next_event`).
    pub fn history_entries(&self) -> usize {
        self.devices
            .iter()
            .map(|c| entries(&self.pickle, c.list).len())
            .sum()
    }

    /// The time of its last event, known before any is read (the replay keeps each
    /// device's clock from going back, so it ends at the device's latest time).
    pub fn latest_t(&self) -> u64 {
        self.latest_t
    }

    /// The end record a snapshot stands for (it was written whole), once `events` events
    /// were read, the last at `last_t`.
    pub fn end(&self, events: u64, last_t: Option<u64>) -> End {
        End {
            t: last_t.unwrap_or(self.latest_t),
            events,
            reason: "snapshot".into(),
            queue_peak_bytes: None,
        }
    }
}

fn header(path: &Path, origin_us: Option<i64>) -> Header {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    Header {
        format: vramtrace_schema::FORMAT_NAME.into(),
        version: vramtrace_schema::FORMAT_VERSION,
        pid: name.as_deref().and_then(pid_of).unwrap_or(0),
        ppid: 0,
        // Each snapshot is its own "host": its device ordinals are its own, and its
        // clock is the wall clock (`time_us`).
        host: name.clone().unwrap_or_default(),
        argv: Vec::new(),
        exe: path.display().to_string(),
        start_unix_ns: origin_us.map_or(0, ns_of_us),
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
        interposer: SNAPSHOT_INTERPOSER.into(),
    }
}

/// Microseconds as nanoseconds, from 0 up to [`MAX_NS`]: a crafted `time_us` of 2^62
/// must neither overflow (it aborted the views) nor push an event past what the views'
/// clock sums hold.
fn ns_of_us(us: i64) -> u64 {
    u64::try_from(us)
        .unwrap_or(0)
        .saturating_mul(1000)
        .min(MAX_NS)
}

/// The latest time a snapshot's event is put at, in ns: about 146 years.
const MAX_NS: u64 = 1 << 62;

/// `torch-snapshot-HOST-PID...pickle` (the PyTorch hook's name; older hooks left out
/// `HOST-`) -> PID.
fn pid_of(name: &str) -> Option<u32> {
    crate::views::snapshots_beside::writer(name).map(|(_, pid)| pid)
}

struct Builder {
    /// Added to every frame address and stack id: 0 for a snapshot of its own,
    /// [`BESIDE_IDS`] for one joining its process's trace.
    base: u64,
    stacks: StackTable,
    frames: Map<(String, i64, String), u64>,
    nodes: Map<(u64, u64), u64>,
    /// Stack ids by frame list (its object in the pickle).
    lists: Map<usize, u64>,
    reader: FrameReader,
    all_frames: bool,
    origin_us: i64,
}

/// The entries of `list`, in order.
fn entries(p: &Pickle, list: Option<Value>) -> &[Value] {
    list.and_then(|l| p.seq(l)).unwrap_or_default()
}

/// Entry `e`, read once already when the file was opened.
fn read(p: &Pickle, e: Value) -> Option<HistoryEntry> {
    history::entry(p, e).ok()
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

    /// The stack id of frame list `v`, read once per list.
    fn stack_of(&mut self, p: &Pickle, v: Option<Value>) -> u64 {
        let id = match v {
            Some(Value::List(id) | Value::Tuple(id)) => id,
            _ => return 0,
        };
        if let Some(&s) = self.lists.get(&id) {
            return s;
        }
        let frames = self.reader.frames(p, v);
        let s = self.stack(&frames);
        self.lists.insert(id, s);
        s
    }

    /// Device `device`'s final state rewound through its history `list`.
    fn rewind(
        &mut self,
        p: &Pickle,
        snap: &Snapshot,
        device: i64,
        list: Option<Value>,
    ) -> Result<Rewound, String> {
        let segments = snap.device(device).map_or(&[][..], |d| &d.segments);
        let r = Rewound::from_final(segments, |frames| self.stack(frames));
        rewind::rewind(p, device, entries(p, list), r)
    }

    /// Device `device`'s cursor: what was alive before its history, queued first.
    fn cursor(
        &mut self,
        path: &Path,
        device: i64,
        list: Option<Value>,
        mut r: Rewound,
        mut layout: Layout,
        notes: &mut Vec<String>,
    ) -> Cursor {
        let dev = device as i32;
        if r.disagree > 0 {
            notes.push(format!(
                "note: {}: device {}: {} history entries do not match the final segments (the file was edited, or entries were dropped)",
                path.display(),
                device,
                r.disagree
            ));
        }
        let alive_before = !r.segments.is_empty() || !r.alive.is_empty();
        if r.entries > 0 && alive_before {
            // A ring buffer that wrapped, or recording turned on late: the views still
            // count what was alive before, from the final segments.
            let unknown = r.alive.values().filter(|a| a.freed_inside).count();
            notes.push(format!(
                "note: {}: device {}: the history does not reach back to the start: {} and {} were alive before its first entry ({} of them freed inside it, with no stack)",
                path.display(),
                device,
                crate::units::count(r.segments.len() as u64, "segment"),
                crate::units::count(r.alive.len() as u64, "tensor"),
                unknown
            ));
        }
        // Block sizes the history does not give: from the layout of the segments then.
        for (&addr, &size) in &r.segments {
            layout.segment_alloc(addr, size);
        }
        for &addr in r.alive.keys() {
            layout.taken(addr);
        }
        for (&addr, a) in r.alive.iter_mut().filter(|(_, a)| a.size == 0) {
            a.size = layout.before_history(addr, a.requested);
        }
        let start = self.time(r.first_us.unwrap_or(self.origin_us));
        let mut pending = VecDeque::new();
        let mut before: Vec<(u64, u64)> = r.segments.into_iter().collect();
        before.sort_unstable();
        for (addr, size) in before {
            let mut e = Event::new(start, 0, dev, Api::CudaMalloc, 0);
            e.addr = addr;
            e.size = size;
            pending.push_back(e);
        }
        let mut tensors: Vec<(u64, Alive)> = r.alive.into_iter().collect();
        tensors.sort_unstable_by_key(|t| t.0);
        for (addr, a) in tensors {
            pending.push_back(block_alloc(start, dev, addr, a.size, a.requested, a.stack));
        }
        Cursor {
            dev,
            list,
            next: 0,
            t: start,
            sizes: r.sizes,
            layout,
            pending,
        }
    }

    /// Epoch microseconds as ns since the snapshot's first entry.
    fn time(&self, us: i64) -> u64 {
        ns_of_us(us.saturating_sub(self.origin_us))
    }
}

impl Cursor {
    /// Reads entries until one gives events, or the history ends.
    fn fill(&mut self, p: &Pickle, b: &mut Builder) {
        let trace = entries(p, self.list);
        while self.pending.is_empty() && self.next < trace.len() {
            let i = self.next;
            self.next += 1;
            if let Some(e) = read(p, trace[i]) {
                self.entry(p, b, i, &e);
            }
        }
        if self.next >= trace.len() {
            self.list = None;
        }
    }

    fn entry(&mut self, p: &Pickle, b: &mut Builder, i: usize, e: &HistoryEntry) {
        let dev = self.dev;
        if let Some(us) = e.time_us {
            self.t = self.t.max(b.time(us));
        }
        let t = self.t;
        let stream = Some(e.stream);
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                self.layout.segment_alloc(e.addr, e.size);
                let mut ev = Event::new(t, 0, dev, Api::CudaMalloc, 0);
                ev.addr = e.addr;
                ev.size = e.size;
                ev.stream = stream;
                self.pending.push_back(ev);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                self.layout.segment_free(e.addr);
                let mut ev = Event::new(t, 0, dev, Api::CudaFree, 0);
                ev.addr = e.addr;
                self.pending.push_back(ev);
            }
            Action::Alloc => {
                let stack = b.stack_of(p, e.frames);
                let inferred = self.layout.alloc(e.addr, e.size);
                // Found by the rewind, last first: the next one is at the end. A tensor
                // freed inside the history has no size there (0).
                let size = match self.sizes.last() {
                    Some(&(at, size)) if at == i => {
                        self.sizes.pop();
                        if size > 0 {
                            size
                        } else {
                            inferred
                        }
                    }
                    _ => inferred,
                };

                let mut ev = block_alloc(t, dev, e.addr, size, e.size, stack);
                ev.stream = stream;
                self.pending.push_back(ev);
            }
            Action::FreeCompleted => {
                self.layout.free(e.addr);
                let mut ev = Event::new(t, 0, dev, Api::VramtraceBlockFree, 0);
                ev.addr = e.addr;
                self.pending.push_back(ev);
            }
            Action::Oom => {
                let mut ev = Event::new(t, 0, dev, Api::CudaMalloc, OUT_OF_MEMORY);
                ev.size = e.size;
                ev.stream = stream;
                ev.stack = b.stack_of(p, e.frames);
                self.pending.push_back(ev);
                if let Some(free) = e.device_free {
                    let mut probe = Event::new(t, 0, dev, Api::ProbeMeminfo, 0);
                    probe.free = Some(free);
                    self.pending.push_back(probe);
                }
            }
            _ => {}
        }
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
