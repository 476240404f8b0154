//! The allocator's state when a history starts, rebuilt from the state at its end (a
//! snapshot's final segments and blocks) by undoing the history, newest entry first. A
//! history is a window: PyTorch's ring buffer of `max_entries` wraps, and recording may
//! begin after the process has memory, so what was alive before its first entry is known
//! only this way.
//!
//! A block alive at the start and freed inside the history has only its requested size in
//! it; its block size is worked out as the allocator would have cut it (`block_size`).
//!
//! Under [`Fit::Strict`] (a replay that must start from the exact state) the first entry
//! the final state contradicts is an error; under [`Fit::Tolerant`] (the views, which
//! read any file) it is kept as a [`Misfit`] and the walk goes on as if the entry were not
//! there, and pages of expandable segments mapped before the history start as runs of
//! their own.

use super::event::Event;
use super::expandable::page_size;
use super::settings::Settings;
use super::sizes::{pool_of_segment, round_size, should_split, Pool};
use super::state::{Span, StartBlock, StartSegment};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// How a history that contradicts its final state is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Strict,
    Tolerant,
}

/// The first entry of a history (in its order) that its final state contradicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misfit {
    /// The entry's index in its source.
    pub entry: usize,
    pub message: String,
}

/// The state at a history's start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Start {
    /// Segments (and, tolerant, runs of mapped expandable pages) in address order, with
    /// the blocks alive then.
    pub segments: Vec<StartSegment>,
    /// Tolerant only: the first entry the final state contradicts.
    pub misfit: Option<Misfit>,
}

/// A block live at some point of the backward walk; `size` unknown for blocks allocated
/// before the trace and freed in it (the trace names their requested size only), which
/// are live until entry `freed_at` (an index of the walk, not of the source).
struct Live {
    size: Option<u64>,
    requested: u64,
    pending_free: bool,
    freed_at: usize,
}

/// A run of mapped pages of an expandable segment: its end, stream and pool.
#[derive(Clone, Copy)]
struct Run {
    end: u64,
    stream: u64,
    pool: Pool,
}

struct Walk {
    fit: Fit,
    /// Fixed segments: address -> (size, stream).
    segments: BTreeMap<u64, (u64, u64)>,
    runs: BTreeMap<u64, Run>,
    /// Bytes mapped in expandable segments, walking back: what a strict walk checks (a
    /// replay from the start then says where pages differ, page by page).
    mapped: i128,
    /// Hashed: the walk touches it at every entry; only the state at the start is read
    /// in address order (`Sorted`).
    live: FxHashMap<u64, Live>,
    /// The walk's index of the first `alloc` at each address.
    first_alloc: FxHashMap<u64, usize>,
    misfit: Option<Misfit>,
}

impl Walk {
    /// Entry `src` does not fit: an error, or (tolerant) kept if it is the earliest yet.
    fn misfit(&mut self, src: usize, what: String) -> Result<(), String> {
        let message = format!("{what}: the trace does not agree with the final segments");
        match self.fit {
            Fit::Strict => Err(format!("trace entry {src}: {message}")),
            Fit::Tolerant => {
                // Walking back, each misfit is earlier than the one before.
                self.misfit = Some(Misfit {
                    entry: src,
                    message,
                });
                Ok(())
            }
        }
    }

    /// Undoes one entry, `i` steps from the end.
    fn undo(&mut self, i: usize, src: usize, ev: &Event) -> Result<(), String> {
        match *ev {
            Event::SegmentAlloc(Span { addr, .. }) => {
                if self.segments.remove(&addr).is_none() {
                    let what = format!("segment_alloc {addr:#x} of a segment not there later");
                    return self.misfit(src, what);
                }
            }
            Event::SegmentFree(Span { addr, size, stream }) => {
                self.segments.insert(addr, (size, stream));
            }
            Event::SegmentMap(s) => {
                self.mapped -= i128::from(s.size);
                if !self.unmap_run(s.addr, s.size) && self.fit == Fit::Tolerant {
                    let what = format!(
                        "segment_map {:#x} of {} bytes, pages not mapped later",
                        s.addr, s.size
                    );
                    return self.misfit(src, what);
                }
            }
            Event::SegmentUnmap(s) => {
                self.mapped += i128::from(s.size);
                self.map_run(s);
            }
            Event::Alloc { addr, .. } => {
                self.first_alloc.insert(addr, i);
                if self.live.remove(&addr).is_none() {
                    let what = format!(
                        "alloc {addr:#x} of a block neither live at the end nor freed later"
                    );
                    return self.misfit(src, what);
                }
            }
            Event::FreeCompleted { addr, size } => {
                let l = Live {
                    size: None,
                    requested: size,
                    pending_free: true,
                    freed_at: i,
                };
                self.live.insert(addr, l);
            }
            Event::FreeRequested { addr, .. } => match self.live.get_mut(&addr) {
                Some(l) => l.pending_free = false,
                None => {
                    let what = format!("free_requested {addr:#x} of a block not live after it");
                    return self.misfit(src, what);
                }
            },
            Event::Oom { .. } => {}
        }
        Ok(())
    }

    /// Takes `[addr, addr + size)` out of the mapped runs; false where it was not all
    /// mapped (nothing changes then).
    fn unmap_run(&mut self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        let Some((&start, &run)) = self.runs.range(..=addr).next_back() else {
            return false;
        };
        if run.end < end {
            return false;
        }
        self.runs.remove(&start);
        if start < addr {
            self.runs.insert(start, Run { end: addr, ..run });
        }
        if end < run.end {
            self.runs.insert(end, run);
        }
        true
    }

    /// Adds `s` to the mapped runs, joined to a run it touches.
    fn map_run(&mut self, s: Span) {
        let end = s.addr.saturating_add(s.size);
        let before = self
            .runs
            .range(..=s.addr)
            .next_back()
            .filter(|(_, r)| r.end == s.addr && r.stream == s.stream)
            .map(|(&a, &r)| (a, r));
        let after = self
            .runs
            .get(&end)
            .copied()
            .filter(|r| r.stream == s.stream);
        // The pool of the run it joins; else by its pages (a large pool's are 20 MiB).
        let pool = before
            .map(|b| b.1.pool)
            .or(after.map(|a| a.pool))
            .unwrap_or(if s.size.is_multiple_of(page_size(Pool::Large)) {
                Pool::Large
            } else {
                Pool::Small
            });
        let mut run = Run {
            end,
            stream: s.stream,
            pool,
        };
        let mut start = s.addr;
        if let Some((a, _)) = before {
            start = a;
        }
        if let Some(a) = after {
            self.runs.remove(&end);
            run.end = a.end;
        }
        self.runs.insert(start, run);
    }
}

/// The state at the start of a history, from `end` (the final segments with their live
/// blocks) and the history's entries newest first, each with its index in the source.
pub fn rebuild(
    end: &[StartSegment],
    settings: &Settings,
    newest_first: impl Iterator<Item = Result<(usize, Event), String>>,
    fit: Fit,
) -> Result<Start, String> {
    let mut w = Walk {
        fit,
        segments: BTreeMap::new(),
        runs: BTreeMap::new(),
        mapped: 0,
        live: FxHashMap::default(),
        first_alloc: FxHashMap::default(),
        misfit: None,
    };
    for s in end {
        if s.expandable {
            let run = Run {
                end: s.addr.saturating_add(s.size),
                stream: s.stream,
                pool: s.pool,
            };
            w.runs.insert(s.addr, run);
            w.mapped += i128::from(s.size);
        } else {
            w.segments.insert(s.addr, (s.size, s.stream));
        }
        for b in &s.blocks {
            let l = Live {
                size: Some(b.size),
                requested: b.requested,
                pending_free: b.pending_free,
                freed_at: usize::MAX,
            };
            w.live.insert(b.addr, l);
        }
    }
    for (i, entry) in newest_first.enumerate() {
        let (src, ev) = entry?;
        w.undo(i, src, &ev)?;
    }
    if fit == Fit::Strict {
        if w.mapped != 0 {
            // A reservation's start and extent are in no snapshot: only the pages mapped in
            // it.
            return Err(format!(
                "the trace starts with {} bytes mapped in expandable segments, whose reserved address space the snapshot does not show: record the history from before the first segment_map to replay it",
                w.mapped
            ));
        }
        w.runs.clear();
    }
    let mut start: Vec<StartSegment> = w
        .segments
        .iter()
        .map(|(&addr, &(size, stream))| StartSegment {
            addr,
            size,
            stream,
            pool: pool_of_segment(size),
            blocks: Vec::new(),
            expandable: false,
        })
        .chain(w.runs.iter().map(|(&addr, r)| StartSegment {
            addr,
            size: r.end - addr,
            stream: r.stream,
            pool: r.pool,
            blocks: Vec::new(),
            expandable: true,
        }))
        .collect();
    start.sort_by_key(|s| s.addr);
    let mut misfit = w.misfit.take();
    let sorted = Sorted {
        live: w.live.iter().map(|(&a, l)| (a, l)).collect(),
        first_alloc: w.first_alloc.iter().map(|(&a, &i)| (a, i)).collect(),
    };
    for (&addr, &l) in &sorted.live {
        let i = start.partition_point(|s| s.addr <= addr);
        let seg = match i.checked_sub(1).map(|i| &mut start[i]) {
            Some(s) if addr < s.addr + s.size => s,
            _ => {
                let what =
                    format!("block {addr:#x}, live when the trace starts, lies in no segment");
                match fit {
                    Fit::Strict => return Err(what),
                    // Earlier than any entry: it is the history's start that does not fit.
                    Fit::Tolerant => {
                        misfit = Some(start_misfit(what));
                        continue;
                    }
                }
            }
        };
        let size = match block_size(&sorted, addr, l, seg, settings) {
            Ok(size) => size,
            Err(what) => match fit {
                Fit::Strict => return Err(what),
                Fit::Tolerant => {
                    misfit = Some(start_misfit(what));
                    continue;
                }
            },
        };
        seg.blocks.push(StartBlock {
            addr,
            size,
            requested: l.requested,
            pending_free: l.pending_free,
            freed_inside: l.size.is_none(),
        });
    }
    Ok(Start {
        segments: start,
        misfit,
    })
}

/// The walk's blocks in address order, once it is over: what was live at the start, and
/// where the history first allocated each address.
struct Sorted<'w> {
    live: BTreeMap<u64, &'w Live>,
    first_alloc: BTreeMap<u64, usize>,
}

/// A misfit of the state at the start itself (before the first entry).
fn start_misfit(what: String) -> Misfit {
    Misfit {
        entry: 0,
        message: format!("{what}: the trace does not agree with the final segments"),
    }
}

/// The size of block `l` at `addr` in `seg` when the history starts: known from the final
/// state, or cut as the allocator would have cut it.
fn block_size(
    w: &Sorted,
    addr: u64,
    l: &Live,
    seg: &StartSegment,
    settings: &Settings,
) -> Result<u64, String> {
    let seg_end = seg.addr + seg.size;
    let end = w
        .live
        .range(addr + 1..)
        .next()
        .map(|(&a, _)| a)
        .filter(|&a| a < seg_end)
        .unwrap_or(seg_end);
    if let Some(s) = l.size {
        return Ok(s);
    }
    // A block the history allocates while this one is live begins past its end. The walk
    // numbers entries newest first: allocated before the free means a larger index.
    let next = w
        .first_alloc
        .range(addr + 1..end)
        .find(|&(_, &at)| at > l.freed_at)
        .map_or(end, |(&a, _)| a);
    let gap = next - addr;
    // Cut before the history, perhaps under other settings than the file names (a
    // `whatif -o` file keeps its recording's start under the settings it replayed): the
    // plain rounding to 512 bytes where the settings' own does not fit, and the rule of
    // the segment's kind (fixed segments split large blocks only past 1 MiB).
    let mut rounded = round_size(l.requested, settings);
    if rounded > gap {
        rounded = round_size(l.requested, &Settings::default());
    }
    if rounded > gap {
        return Err(format!(
            "block {addr:#x} ({} bytes requested), live when the trace starts, overlaps the next block",
            l.requested
        ));
    }
    let rule = Settings {
        expandable_segments: seg.expandable,
        ..settings.clone()
    };
    // Split as the allocator would have, had the space up to the next block live beside it
    // been one free block when it was allocated: where that space leaves no remainder the
    // allocator splits off, the block is all of it (no free block that small can lie after
    // it in that pool).
    Ok(if should_split(seg.pool, gap, rounded, &rule) {
        rounded
    } else {
        gap
    })
}
