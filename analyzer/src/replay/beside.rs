//! The PyTorch hook's snapshots (`torch-snapshot-HOST-PID*.pickle`, beside the traces)
//! joining the allocated layer of the process that wrote them: its tensors, named by their
//! Python call sites, on the trace's clock. The trace keeps what it saw itself (segments,
//! failed calls, the driver's answers); the snapshot adds the tensors only.
//!
//! Clocks: a snapshot's times are wall clock (`time_us`), a trace's are its monotonic
//! clock from its header's start, whose wall clock the header gives too; so a tensor's
//! time on the trace's clock is its wall clock less the trace's start. The segments both
//! saw (the same address and size) check it: a note says when they put the clocks
//! further apart than a few milliseconds. (They do not move the tensors: the replay is
//! one pass, and the first shared segment may come long after the first tensor.)
//!
//! An allocator that annotates its own blocks (`vramtrace_block_alloc`) already gives the
//! process's tensors: from its first annotation on, the snapshot's tensors are withdrawn
//! (freed from the allocated layer at that moment) and no more join, rather than count
//! the same memory twice. (PyTorch does not annotate today; this keeps a future adapter
//! that does from being counted twice.)
//!
//! A process may leave several snapshots (one at its first out-of-memory error, one at
//! exit), whose histories overlap: the one whose history ends last joins, the others are
//! named in a note (summing them would count a tensor twice).

use super::snapshots_beside::{may_own, owner_of, snapshots_beside};
use super::Event;
use crate::model::{ProcessModel, TensorCategories};
use crate::snapshot::events::SnapshotEvents;
use crate::snapshot::events::SNAPSHOT_INTERPOSER;
use std::collections::BTreeSet;
use std::path::PathBuf;
use vramtrace_schema::{Api, Op, StackTable};

/// One snapshot's tensors, as events of the process `process` (its trace's clock).
pub struct Beside {
    pub process: usize,
    pub path: PathBuf,
    snap: SnapshotEvents,
    /// Wall clock of the snapshot's time 0 less the trace's start (ns; may be negative).
    shift: i128,
    /// The history's segment allocations by (address, size): their times on the trace's
    /// clock by the wall clock, in order, to be checked against the trace's own
    /// `cudaMalloc` of the same segment (the first [`CLOCK_CHECKS`]).
    segments: crate::model::Map<(u64, u64), Vec<u64>>,
    /// Trace time less snapshot time of each segment both saw.
    offsets: Vec<i128>,
}

/// Segments the clocks are checked on, at most.
const CLOCK_CHECKS: usize = 1000;

/// The furthest apart a segment of the trace and one of the history may be and still be
/// taken for the same allocation: an address is reused, and a history that does not
/// reach back to the start shares it with earlier allocations of the trace.
const SAME_SEGMENT_NS: i128 = 1_000_000_000;

/// How far apart the two clocks may be before a note says so: a tensor may then be
/// counted on the wrong side of a failure or a peak that close to it.
const CLOCK_TOLERANCE_NS: i128 = 5_000_000;

impl Beside {
    /// The next tensor event, on the trace's clock (a moment before the trace's start
    /// counts as its start).
    pub fn next_event(&mut self) -> Option<Event> {
        while let Some(mut e) = self.snap.next_event() {
            if !matches!(e.api.op(), Op::BlockAlloc | Op::BlockFree) {
                continue;
            }
            e.t = u64::try_from((e.t as i128 + self.shift).max(0)).unwrap_or(u64::MAX);
            return Some(e);
        }
        None
    }

    /// Adds to `into` the categories of the stacks its events made since the last call.
    pub fn learn_categories(&mut self, into: &mut crate::model::Map<u64, crate::model::Category>) {
        self.snap.learn_categories(into);
    }

    /// The frames and stacks the tensors point at (ids clear of the trace's), and their
    /// categories.
    pub fn take_stacks(&mut self) -> (StackTable, TensorCategories) {
        self.snap.take_stacks()
    }

    /// The trace's own event `e` (of the process): a segment the history saw allocated
    /// tells how far apart the two clocks are.
    pub fn check_clock(&mut self, e: &Event) {
        if e.api.op() != Op::Alloc || !e.ok() || self.offsets.len() >= CLOCK_CHECKS {
            return;
        }
        // The history's allocation of that segment nearest in time.
        let Some(times) = self.segments.get(&(e.addr, e.size)) else {
            return;
        };
        let at = times.partition_point(|&t| t < e.t);
        let nearest = [at.checked_sub(1), Some(at)]
            .into_iter()
            .flatten()
            .filter_map(|k| times.get(k))
            .map(|&t| e.t as i128 - t as i128)
            .min_by_key(|d| d.abs());
        if let Some(d) = nearest.filter(|d| d.abs() <= SAME_SEGMENT_NS) {
            self.offsets.push(d);
        }
    }

    /// A note when the segments both saw say the clocks are further apart than
    /// [`CLOCK_TOLERANCE_NS`] (the median of the differences).
    pub fn clock_note(&mut self) -> Option<String> {
        if self.offsets.is_empty() {
            return None;
        }
        self.offsets.sort_unstable();
        let median = self.offsets[self.offsets.len() / 2];
        (median.abs() > CLOCK_TOLERANCE_NS).then(|| {
            format!(
                "note: {}: by {} it shares with its process's trace, its clock is {:.1} ms {} the trace's: its tensors are placed by the wall clock, that far off",
                self.path.display(),
                crate::units::count(self.offsets.len() as u64, "segment"),
                median.abs() as f64 / 1e6,
                if median > 0 { "behind" } else { "ahead of" }
            )
        })
    }
}

/// The hook's snapshots in directories `dirs` that belong to one of the traced
/// `processes`, one per process. What is left out, and why, goes to `notes`.
pub fn hook_snapshots(
    dirs: &[PathBuf],
    processes: &[ProcessModel],
    notes: &mut Vec<String>,
) -> Vec<Beside> {
    let traced = |p: &ProcessModel| p.header.interposer != SNAPSHOT_INTERPOSER;
    if !processes.iter().any(traced) {
        return Vec::new();
    }
    let all_frames = crate::frame_options::all_frames();
    // Per process: (wall clock of the history's last entry, the snapshot).
    let mut chosen: Vec<Option<(u64, Beside)>> = (0..processes.len()).map(|_| None).collect();
    for file in snapshots_beside(dirs) {
        // By its name first: another process's snapshot is not decoded at all.
        if !processes.iter().any(|m| traced(m) && may_own(m, &file)) {
            continue;
        }
        let snap = match SnapshotEvents::open_beside(&file.path, all_frames) {
            Ok(s) => s,
            Err(e) => {
                notes.push(format!(
                    "note: {e} (its tensors are left out of the allocated layer)"
                ));
                continue;
            }
        };
        if snap.header.start_unix_ns == 0 {
            // Before PyTorch 2.2 a history has no times: no place on the trace's clock.
            notes.push(format!(
                "note: {}: its history has no times (PyTorch before 2.2): its tensors are left out of the allocated layer",
                file.path.display()
            ));
            continue;
        }
        let last_ns = snap.header.start_unix_ns.saturating_add(snap.latest_t());
        let Some(p) = owner_of(processes, &file, Some(last_ns / 1000)) else {
            continue;
        };
        if !traced(&processes[p]) {
            continue;
        }
        // Its history must reach into the process's life: a process of another run with
        // the same pid is not its writer.
        if processes[p].header.start_unix_ns > last_ns {
            notes.push(format!(
                "note: {}: its history ends before {} began (another run of the same pid?): its tensors are left out of the allocated layer",
                file.path.display(),
                processes[p].path.display()
            ));
            continue;
        }
        let shift = snap.header.start_unix_ns as i128 - processes[p].header.start_unix_ns as i128;
        let on_trace = |t: u64| u64::try_from((t as i128 + shift).max(0)).unwrap_or(u64::MAX);
        let mut segments: crate::model::Map<(u64, u64), Vec<u64>> = Default::default();
        for (addr, size, t) in snap.segments_ahead().into_iter().take(CLOCK_CHECKS) {
            // In time order: each list stays sorted.
            segments.entry((addr, size)).or_default().push(on_trace(t));
        }
        let beside = Beside {
            process: p,
            path: file.path,
            snap,
            shift,
            segments,
            offsets: Vec::new(),
        };
        let (keep, drop) = match chosen[p].take() {
            Some((t, old)) if t >= last_ns => ((t, old), Some(beside.path)),
            Some((_, old)) => ((last_ns, beside), Some(old.path)),
            None => ((last_ns, beside), None),
        };
        if let Some(dropped) = drop {
            notes.push(format!(
                "note: {}: left out of the allocated layer: {} of the same process has a history that ends later (their histories overlap)",
                dropped.display(),
                keep.1.path.display()
            ));
        }
        chosen[p] = Some(keep);
    }
    chosen.into_iter().flatten().map(|(_, b)| b).collect()
}

/// Which processes a snapshot joins, and what of it is live in each, as the replay goes.
pub struct Joined {
    /// Processes a snapshot joins.
    joins: Vec<bool>,
    /// Processes whose own allocator annotated a block: the snapshot no longer joins.
    annotates: Vec<bool>,
    /// The snapshot's tensors live in each process: (address, device).
    live: Vec<BTreeSet<(u64, i32)>>,
    /// Processes whose withdrawal is still to be said.
    unsaid: Vec<usize>,
}

impl Joined {
    pub fn new(processes: usize, joining: impl Iterator<Item = usize>) -> Joined {
        let mut joins = vec![false; processes];
        for p in joining {
            joins[p] = true;
        }
        Joined {
            joins,
            annotates: vec![false; processes],
            live: vec![BTreeSet::new(); processes],
            unsaid: Vec::new(),
        }
    }

    /// Whether `e`, an event of process `i` (from its snapshot: `beside`), is applied, and
    /// the frees that withdraw the snapshot's tensors first (at the process's first own
    /// annotation).
    pub fn admit(&mut self, i: usize, beside: bool, e: &Event) -> (bool, Vec<Event>) {
        if !self.joins[i] {
            return (true, Vec::new());
        }
        if beside {
            if self.annotates[i] {
                return (false, Vec::new());
            }
            match e.api.op() {
                Op::BlockAlloc => self.live[i].insert((e.addr, e.dev)),
                _ => self.live[i].remove(&(e.addr, e.dev)),
            };
            return (true, Vec::new());
        }
        if e.api.op() != Op::BlockAlloc || self.annotates[i] {
            return (true, Vec::new());
        }
        self.annotates[i] = true;
        self.unsaid.push(i);
        let frees = std::mem::take(&mut self.live[i])
            .into_iter()
            .map(|(addr, dev)| {
                let mut free = Event::new(e.t, e.tid, dev, Api::VramtraceBlockFree, 0);
                free.addr = addr;
                free
            })
            .collect();
        (true, frees)
    }

    /// The note for process `i`, once, when its snapshot stopped joining.
    pub fn note(&mut self, i: usize, p: &ProcessModel) -> Option<String> {
        let at = self.unsaid.iter().position(|&u| u == i)?;
        self.unsaid.swap_remove(at);
        Some(format!(
            "note: {}: its allocator annotates its own blocks: the tensors of its PyTorch snapshot leave the allocated layer at its first annotation (they would be counted twice)",
            p.path.display()
        ))
    }
}
