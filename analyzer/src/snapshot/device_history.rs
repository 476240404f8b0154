//! One device of a snapshot as the events of a trace, its history followed through the
//! allocator model (`crate::allocator::follow`), so that every view reads what `whatif`
//! replays: segments are the reserved layer (`cudaMalloc`, `cudaFree`; the pages of an
//! expandable segment `cuMemCreate` and `cuMemRelease`, one handle a page as PyTorch
//! maps them), tensors the allocated layer (block annotations, at the size the model cuts
//! each block, with the stack of the allocation), each `oom` entry a failed `cudaMalloc`
//! followed by the driver's free bytes.
//!
//! The history is a window (the `max_entries` ring buffer, or recording that began late):
//! what was alive before it is rebuilt from the final segments and blocks
//! (`crate::allocator::start`) and handed out first, at the window's first time, so views
//! see absolute memory. A tensor counts from its `alloc` to its `free_completed`.

use super::allocator_input::{end_state_tolerant, event_of};
use super::history::{self, HistoryEntry};
use super::labels::Labels;
use super::model::{Action, DeviceSnapshot};
use super::pickle::{Pickle, Value};
use super::stack_ids::StackIds;
use super::start_events::{block_alloc, pages, StartEvents};
use crate::allocator::check;
use crate::allocator::follow::{Follow, Shape};
use crate::allocator::start::{self, Fit, Misfit, Start};
use crate::allocator::{Event as Request, Settings, StartSegment};
use crate::model::{Map, Window};
use std::collections::VecDeque;
use vramtrace_schema::{Api, Event};

/// `cudaErrorMemoryAllocation`: what the caching allocator's `cudaMalloc` got.
const OUT_OF_MEMORY: i32 = 2;

/// Times of a history's entries (`time_us`): the first that has one, the earliest and
/// the latest.
#[derive(Debug, Clone, Copy, Default)]
pub struct Times {
    pub first_us: Option<i64>,
    pub earliest_us: Option<i64>,
    pub latest_us: Option<i64>,
}

impl Times {
    fn saw(&mut self, us: Option<i64>) {
        if let Some(us) = us {
            // Walking back: the last one seen is the first.
            self.first_us = Some(us);
            self.earliest_us = Some(self.earliest_us.map_or(us, |m| m.min(us)));
            self.latest_us = Some(self.latest_us.map_or(us, |m| m.max(us)));
        }
    }
}

/// One device's history, rebuilt at its start, before any event is read.
pub struct Rebuilt {
    pub device: i64,
    pub list: Option<Value>,
    pub entries: usize,
    pub start: Start,
    pub end: Vec<StartSegment>,
    pub times: Times,
    pub settings: Settings,
    /// Live blocks of the final state by address: their stacks.
    pub stacks: Map<u64, u64>,
    /// Tensors from before the history that it frees, by address: stacks of their labels
    /// alone (their frames are not known).
    pub freed_stacks: Map<u64, u64>,
    /// What labels its tensors (private pools), and what could not.
    pub labels: Labels,
}

/// The entries of `list`, in order.
pub fn entries(p: &Pickle, list: Option<Value>) -> &[Value] {
    list.and_then(|l| p.seq(l)).unwrap_or_default()
}

/// Entry `i` of `device`'s history, read (errors name it).
fn read(p: &Pickle, device: i64, i: usize, v: Value) -> Result<HistoryEntry, String> {
    history::entry(p, v).map_err(|msg| {
        format!("not a PyTorch memory snapshot: device_traces[{device}][{i}]: {msg}")
    })
}

/// The request entry `e` is, if any (an implausible size or address is none, and the
/// first one found is `bad`).
fn request(i: usize, e: &HistoryEntry, bad: &mut Option<Misfit>) -> Option<Request> {
    match event_of(i, &e.action, e.addr, e.size, e.stream, e.device_free) {
        Ok(r) => r,
        Err(message) => {
            *bad = Some(Misfit { entry: i, message });
            None
        }
    }
}

/// Device `d`'s history `list` undone from its final state: the state at its start.
/// Every entry is read here, so a malformed one refuses the file now.
pub fn rebuild(
    p: &Pickle,
    d: &DeviceSnapshot,
    list: Option<Value>,
    recorded: &Settings,
    stacks: &mut StackIds,
) -> Result<Rebuilt, String> {
    let (end, mut bad) = end_state_tolerant(d);
    let mut times = Times::default();
    let trace = entries(p, list);
    let mut maps = false;
    let mut annotates = false;
    let mut unplausible = None;
    let mut failed = Ok(());
    let newest_first = trace.iter().enumerate().rev().filter_map(|(i, &v)| {
        let e = match read(p, d.device, i, v) {
            Ok(e) => e,
            Err(msg) => {
                failed = Err(msg);
                return None;
            }
        };
        times.saw(e.time_us);
        maps |= e.action == Action::SegmentMap;
        annotates |= matches!(&e.action, Action::Other(a) if a == super::labels::ANNOTATE);
        request(i, &e, &mut unplausible).map(|r| Ok((i, r)))
    });
    let mut settings = recorded.clone();
    // Expandable segments in use where the settings do not say so (snapshots before 2.4
    // record none): an expandable segment shows it (a `segment_map`, met in the walk, too).
    settings.expandable_segments |= end.iter().any(|s| s.expandable);
    let mut start = start::rebuild(&end, &settings, newest_first, Fit::Tolerant)?;
    failed?;
    if maps && !settings.expandable_segments {
        settings.expandable_segments = true;
        start = start::rebuild(
            &end,
            &settings,
            newest_first_again(p, d, trace)?,
            Fit::Tolerant,
        )?;
    }
    // The earliest of what does not fit: the file's own figures, an entry, the walk's.
    for m in [bad.take(), unplausible].into_iter().flatten() {
        if start.misfit.as_ref().is_none_or(|s| s.entry > m.entry) {
            start.misfit = Some(m);
        }
    }
    let mut labels = Labels::of_device(p, d, trace, annotates);
    let mut by_addr = Map::default();
    for s in &d.segments {
        for b in s
            .blocks
            .iter()
            .filter(|b| b.state != super::BlockState::Inactive)
        {
            // Used for the tensors alive before the history: allocated before it.
            let label = labels.label(p, b.address, None, None);
            by_addr.insert(b.address, stacks.stack(&b.frames, label));
        }
    }
    let mut freed_stacks = Map::default();
    for s in &start.segments {
        for b in s.blocks.iter().filter(|b| b.freed_inside) {
            let label = labels.label(p, b.addr, None, None);
            if !label.is_empty() {
                freed_stacks.insert(b.addr, stacks.stack(&[], label));
            }
        }
    }
    Ok(Rebuilt {
        device: d.device,
        list,
        entries: trace.len(),
        start,
        end,
        times,
        settings,
        stacks: by_addr,
        freed_stacks,
        labels,
    })
}

/// The history newest first once more (read before, so it reads without error).
fn newest_first_again<'a>(
    p: &'a Pickle,
    d: &'a DeviceSnapshot,
    trace: &'a [Value],
) -> Result<impl Iterator<Item = Result<(usize, Request), String>> + 'a, String> {
    Ok(trace.iter().enumerate().rev().filter_map(move |(i, &v)| {
        let e = read(p, d.device, i, v).ok()?;
        request(i, &e, &mut None).map(|r| Ok((i, r)))
    }))
}

/// One device's events: those alive before the history, then its entries in order.
pub struct Cursor {
    pub dev: i32,
    list: Option<Value>,
    next: usize,
    /// The clock: entries without `time_us` keep the last time.
    t: u64,
    follow: Follow,
    end: Vec<StartSegment>,
    pub window: Window,
    /// The allocator's shape at each `oom` entry, in order, and after the last entry.
    pub shapes: Vec<Shape>,
    pub end_shape: Option<Shape>,
    /// What was alive before the history, handed out before its first entry.
    start: StartEvents,
    pending: VecDeque<Event>,
    pub labels: Labels,
}

impl Cursor {
    /// The cursor of `r`: its start's segments and tensors come first, at time `start_t`.
    pub fn new(r: Rebuilt, start_t: u64) -> Cursor {
        let dev = r.device as i32;
        let mut window = Window {
            entries: r.entries,
            segments: r.start.segments.len(),
            ..Window::default()
        };
        for s in &r.start.segments {
            window.reserved = window.reserved.saturating_add(s.size);
            for b in &s.blocks {
                window.tensors += 1;
                window.allocated = window.allocated.saturating_add(b.size);
                window.requested = window.requested.saturating_add(b.requested);
                window.freed_inside += b.freed_inside as usize;
            }
        }
        let start = StartEvents::new(&r.start, start_t, dev, &r.stacks, &r.freed_stacks);
        Cursor {
            dev,
            list: r.list,
            next: 0,
            t: start_t,
            follow: Follow::new(r.settings, None, r.start),
            end: r.end,
            window,
            shapes: Vec::new(),
            end_shape: None,
            start,
            pending: VecDeque::new(),
            labels: r.labels,
        }
    }

    pub fn front(&self) -> Option<&Event> {
        self.pending.front()
    }

    pub fn pop(&mut self) -> Option<Event> {
        self.pending.pop_front()
    }

    /// The segment allocations its history has not handed out yet, with a time in ns
    /// (`time`): (address, size, time).
    pub fn segments_ahead(&self, p: &Pickle, time: impl Fn(i64) -> u64) -> Vec<(u64, u64, u64)> {
        entries(p, self.list)
            .get(self.next..)
            .unwrap_or_default()
            .iter()
            .filter_map(|&v| history::entry(p, v).ok())
            .filter(|e| matches!(e.action, Action::SegmentAlloc | Action::SegmentMap))
            .filter_map(|e| Some((e.addr, e.size, time(e.time_us?))))
            .collect()
    }

    /// Takes the start's next event, or else reads entries until one gives events or the
    /// history ends; `time` puts epoch microseconds on the run's clock.
    pub fn fill(&mut self, p: &Pickle, stacks: &mut StackIds, time: impl Fn(i64) -> u64) {
        if self.pending.is_empty() {
            if let Some(e) = self.start.next() {
                self.pending.push_back(e);
                return;
            }
        }
        let trace = entries(p, self.list);
        while self.pending.is_empty() && self.next < trace.len() {
            let i = self.next;
            self.next += 1;
            let Ok(e) = history::entry(p, trace[i]) else {
                continue;
            };
            if let Some(us) = e.time_us {
                self.t = self.t.max(time(us));
            }
            if let Some(r) = request(i, &e, &mut None) {
                self.entry(p, stacks, i, &e, &r);
            }
        }
        if self.next >= trace.len() && self.end_shape.is_none() {
            self.finish(trace.len());
        }
    }

    /// After the last entry: the model against the recorded final segments.
    fn finish(&mut self, len: usize) {
        self.end_shape = Some(self.follow.shape());
        if let Some(message) = check::end_state(&self.follow.allocator, &self.end) {
            if self.follow.misfit.is_none() && self.follow.drift.is_none() {
                self.follow.misfit = Some(Misfit {
                    entry: len,
                    message,
                });
            }
        }
    }

    /// The first entry the model and the recording disagree at, and the first that
    /// contradicts the final state.
    pub fn drift(&self) -> Option<&Misfit> {
        self.follow.drift.as_ref()
    }

    pub fn misfit(&self) -> Option<&Misfit> {
        self.follow.misfit.as_ref()
    }

    fn entry(
        &mut self,
        p: &Pickle,
        stacks: &mut StackIds,
        i: usize,
        e: &HistoryEntry,
        r: &Request,
    ) {
        let (dev, t) = (self.dev, self.t);
        let stream = Some(e.stream);
        // The pages an unmap releases are its segment's, which may be gone after it.
        let unmapped_page = match *r {
            Request::SegmentUnmap(s) => self.follow.page_at(s.addr),
            _ => None,
        };
        let size = self.follow.apply(i, r);
        match *r {
            Request::SegmentAlloc(s) => {
                self.pending
                    .extend(reserved(t, dev, s.addr, s.size, s.stream, None));
            }
            Request::SegmentMap(s) => {
                let page = self.follow.page_at(s.addr);
                self.pending
                    .extend(reserved(t, dev, s.addr, s.size, s.stream, page));
            }
            Request::SegmentFree(s) => {
                let mut ev = Event::new(t, 0, dev, Api::CudaFree, 0);
                ev.addr = s.addr;
                self.pending.push_back(ev);
            }
            Request::SegmentUnmap(s) => {
                for (addr, size) in pages(s.addr, s.size, unmapped_page) {
                    let mut ev = Event::new(t, 0, dev, Api::CuMemUnmap, 0);
                    ev.addr = addr;
                    ev.size = size;
                    self.pending.push_back(ev);
                    let mut ev = Event::new(t, 0, dev, Api::CuMemRelease, 0);
                    ev.handle = Some(addr);
                    self.pending.push_back(ev);
                }
            }
            Request::Alloc {
                addr,
                size: requested,
                ..
            } => {
                let label = self.labels.label(p, addr, Some(i), e.user_metadata);
                let stack = stacks.stack_of(p, e.frames, label);
                let mut ev = block_alloc(t, dev, addr, size.unwrap_or(0), requested, stack);
                ev.stream = stream;
                self.pending.push_back(ev);
            }
            Request::FreeCompleted { addr, .. } => {
                let mut ev = Event::new(t, 0, dev, Api::VramtraceBlockFree, 0);
                ev.addr = addr;
                self.pending.push_back(ev);
            }
            Request::FreeRequested { .. } => {}
            Request::Oom {
                size, device_free, ..
            } => {
                self.shapes.push(self.follow.shape());
                let mut ev = Event::new(t, 0, dev, Api::CudaMalloc, OUT_OF_MEMORY);
                ev.size = size;
                ev.stream = stream;
                ev.stack = stacks.stack_of(p, e.frames, Default::default());
                self.pending.push_back(ev);
                if let Some(free) = device_free {
                    let mut probe = Event::new(t, 0, dev, Api::ProbeMeminfo, 0);
                    probe.free = Some(free);
                    self.pending.push_back(probe);
                }
            }
        }
    }
}

/// Reserved memory the driver gave: a segment (`cudaMalloc`), or the pages of an
/// expandable segment (`cuMemCreate` and `cuMemMap`, one handle a page as PyTorch maps
/// them, named by the page's address).
fn reserved(t: u64, dev: i32, addr: u64, size: u64, stream: u64, page: Option<u64>) -> Vec<Event> {
    let Some(_) = page else {
        let mut e = Event::new(t, 0, dev, Api::CudaMalloc, 0);
        e.addr = addr;
        e.size = size;
        e.stream = Some(stream);
        return vec![e];
    };
    let mut out = Vec::new();
    for (a, s) in pages(addr, size, page) {
        let mut e = Event::new(t, 0, dev, Api::CuMemCreate, 0);
        e.handle = Some(a);
        e.size = s;
        out.push(e);
        let mut e = Event::new(t, 0, dev, Api::CuMemMap, 0);
        e.addr = a;
        e.size = s;
        e.handle = Some(a);
        e.offset = Some(0);
        out.push(e);
    }
    out
}
