//! A recorded history followed through the model: each block placed where the recording
//! put it, each segment and page where the driver gave it. The model then says what the
//! history leaves out - the size of each block (the rounded request, or the whole free
//! block where the rest is too small to split off), the free blocks between them, the
//! pages mapped - by the same rules `whatif` chooses addresses with; where the model
//! would have chosen the recorded address, the two are one replay.
//!
//! Where the model's layout and the recording part (the recorded address lies inside a
//! free block, not at its start), the recording is followed from there and the first such
//! entry is kept as a drift. Where the recording contradicts itself (a block allocated
//! where one is live, a free of what was never allocated, a segment freed with blocks in
//! it), the first such entry is kept as a misfit, and the views go on with what the
//! recording says.

use super::blocks::NONE;
use super::event::Event;
use super::expandable::page_size;
use super::settings::Settings;
use super::sizes::{pool_of_segment, round_size, should_split, Pool};
use super::start::{Misfit, Start};
use super::state::{Allocator, Span};
use rustc_hash::FxHashMap;

/// One device's allocator, following its history.
pub struct Follow {
    pub allocator: Allocator,
    /// The first entry whose recorded address the model's layout did not have at the start
    /// of a free block.
    pub drift: Option<Misfit>,
    /// The first entry the recording and the model's state contradict.
    pub misfit: Option<Misfit>,
    /// Blocks the model could not place (at a misfit), by address: their sizes, for the
    /// frees that follow.
    unplaced: FxHashMap<u64, u64>,
}

/// What the allocator looked like at a moment: the figures a post-mortem needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Bytes the driver gave: segments, and the mapped pages of expandable ones.
    pub reserved: u64,
    /// Bytes of blocks handed out (and pending-free ones).
    pub allocated: u64,
    /// Free blocks of mapped memory: the largest, how many, and their bytes.
    pub largest_free: u64,
    pub free_blocks: u64,
    pub free_bytes: u64,
    /// Address space of expandable segments reserved but not mapped: no memory.
    pub unmapped: u64,
    /// Whether any segment is expandable.
    pub expandable: bool,
}

impl Follow {
    /// The model at the history's start, under the recorded `settings` on a card of
    /// `card` bytes (the address space an expandable segment reserves).
    pub fn new(settings: Settings, card: Option<u64>, start: Start) -> Follow {
        let mut f = Follow {
            allocator: Allocator::new(settings, card),
            drift: None,
            misfit: start.misfit,
            unplaced: FxHashMap::default(),
        };
        for seg in start.segments.iter().filter(|s| !s.expandable) {
            if let Err(e) = f.allocator.load_segment(seg) {
                f.contradicts(0, e);
            }
        }
        for run in start.segments.iter().filter(|s| s.expandable) {
            let a = &mut f.allocator;
            let pages = Span {
                addr: run.addr,
                size: run.size,
                stream: run.stream,
            };
            if let Err(e) = a.map_range(pages, Some(run.pool)) {
                f.contradicts(0, e);
                continue;
            }
            let Some(id) = a.block_containing(run.addr) else {
                continue;
            };
            // The run's free block, which may reach into pages mapped beside it.
            a.remove_free(id);
            if let Err(e) = a.carve(id, run) {
                f.contradicts(0, e);
            }
        }
        f
    }

    fn contradicts(&mut self, entry: usize, message: String) {
        if self.misfit.as_ref().is_none_or(|m| m.entry > entry) {
            self.misfit = Some(Misfit { entry, message });
        }
    }

    fn drifts(&mut self, entry: usize, message: String) {
        if self.drift.is_none() {
            self.drift = Some(Misfit { entry, message });
        }
    }

    /// Entry `src` of the history; for an `alloc`, the block's size.
    pub fn apply(&mut self, src: usize, ev: &Event) -> Option<u64> {
        match *ev {
            Event::Alloc { size, stream, addr } => {
                return Some(self.alloc(src, addr, size, stream))
            }
            Event::FreeRequested { addr, .. } => {
                if self.allocator.free(addr, true).is_none() && !self.unplaced.contains_key(&addr) {
                    let m = format!("free_requested {addr:#x} of a block not allocated");
                    self.contradicts(src, m);
                }
            }
            Event::FreeCompleted { addr, .. } => {
                let live = self.allocator.live_block(addr);
                match live {
                    Some(id) => self.allocator.free_block(id),
                    None if self.unplaced.remove(&addr).is_some() => {}
                    None => {
                        let m = format!("free_completed {addr:#x} of a block not allocated");
                        self.contradicts(src, m);
                    }
                }
            }
            Event::SegmentAlloc(s) => {
                if let Err(m) = self.allocator.segment_alloc(s) {
                    self.contradicts(src, m);
                }
            }
            Event::SegmentFree(s) => {
                if let Err(m) = self.allocator.segment_free(s.addr) {
                    self.contradicts(src, m);
                }
            }
            Event::SegmentMap(s) => {
                if let Err(m) = self.allocator.map_range(s, None) {
                    self.contradicts(src, m);
                }
            }
            Event::SegmentUnmap(s) => {
                if let Err(m) = self.allocator.unmap_range(s.addr, s.size) {
                    self.contradicts(src, m);
                }
            }
            Event::Oom { .. } => {}
        }
        None
    }

    /// A block of `requested` bytes at `addr`: its size.
    fn alloc(&mut self, src: usize, addr: u64, requested: u64, stream: u64) -> u64 {
        let a = &mut self.allocator;
        let rounded = round_size(requested, &a.settings);
        if let Some(&id) = a.free_at.get(&addr) {
            let b = a.block(id);
            if b.size >= rounded {
                if b.stream != stream {
                    let m = format!(
                        "alloc {addr:#x} of {requested} bytes on stream {stream:#x}, in a segment the model has on stream {:#x}",
                        b.stream
                    );
                    self.drifts(src, m);
                }
                return self.allocator.take_at(id, rounded, requested);
            }
        }
        // Not the start of a free block that holds it: what the model has there.
        let Some(id) = a.block_containing(addr) else {
            let m = format!("alloc {addr:#x} of {requested} bytes, in no segment");
            return self.unplace(src, addr, rounded, m);
        };
        let b = a.block(id).clone();
        let fits = b.addr.saturating_add(b.size) >= addr.saturating_add(rounded);
        if b.busy() || !b.mapped || !fits {
            let what = if b.busy() {
                "allocated"
            } else if !b.mapped {
                "unmapped"
            } else {
                "too small a free"
            };
            let m = format!(
                "alloc {addr:#x} of {requested} bytes, inside the {what} block {:#x} of {} bytes",
                b.addr, b.size
            );
            return self.unplace(src, addr, rounded, m);
        }
        let m = format!(
            "alloc {addr:#x} of {requested} bytes: the model has that address inside the free block {:#x} of {} bytes, not at its start; the recording is followed",
            b.addr, b.size
        );
        self.drifts(src, m);
        let a = &mut self.allocator;
        a.remove_free(id);
        let tail = a.split_off(id, addr - b.addr);
        a.insert_free(id);
        a.insert_free(tail);
        a.take_at(tail, rounded, requested)
    }

    /// An `alloc` the model cannot place: counted at its rounded size, the model as it was.
    fn unplace(&mut self, src: usize, addr: u64, rounded: u64, message: String) -> u64 {
        self.contradicts(src, message);
        self.unplaced.insert(addr, rounded);
        rounded
    }

    /// The allocator's figures now.
    pub fn shape(&self) -> Shape {
        let a = &self.allocator;
        let (mut largest, mut count, mut bytes) = (0, 0, 0);
        for id in a.free.iter().flat_map(|p| p.values()) {
            let size = a.block(*id).size;
            largest = largest.max(size);
            count += 1;
            bytes += size;
        }
        let unmapped = a
            .unmapped
            .iter()
            .flat_map(|p| p.values())
            .map(|&id| a.block(id).size)
            .sum();
        Shape {
            reserved: a.reserved,
            allocated: a.allocated,
            largest_free: largest,
            free_blocks: count,
            free_bytes: bytes,
            unmapped,
            expandable: a.segments.values().any(|s| s.expandable),
        }
    }

    /// The page size of the expandable segment holding `addr` (its pages are mapped and
    /// unmapped whole); `None` outside every expandable segment.
    pub fn page_at(&self, addr: u64) -> Option<u64> {
        let (_, seg) = self.allocator.segment_at(addr)?;
        seg.expandable.then(|| page_size(seg.pool))
    }
}

impl Allocator {
    /// Takes free block `id`, which starts where the request was recorded and holds its
    /// `rounded` bytes, splitting off the rest where the allocator would: the block's size.
    fn take_at(&mut self, id: u32, rounded: u64, requested: u64) -> u64 {
        let b = self.block(id);
        let split = should_split(b.pool, b.size, rounded, &self.settings);
        self.remove_free(id);
        let id = self.take_block(id, rounded, requested, split);
        self.block(id).size
    }

    /// The block holding `addr`, if a segment does.
    pub fn block_containing(&self, addr: u64) -> Option<u32> {
        let (_, seg) = self.segment_at(addr)?;
        let mut id = seg.first;
        while id != NONE {
            let b = self.block(id);
            if addr < b.addr.saturating_add(b.size) {
                return (addr >= b.addr).then_some(id);
            }
            id = b.next;
        }
        None
    }

    /// A recorded `segment_alloc`: a segment with one free block.
    fn segment_alloc(&mut self, s: Span) -> Result<(), String> {
        let end = s.addr.saturating_add(s.size);
        let overlaps =
            self.segment_at(s.addr).is_some() || self.segments.range(s.addr..end).next().is_some();
        if overlaps || s.size == 0 {
            return Err(format!(
                "segment_alloc {:#x} of {} bytes over a segment already there",
                s.addr, s.size
            ));
        }
        let id = self.add_segment(s.addr, s.size, s.stream, pool_of_segment(s.size), false);
        self.insert_free(id);
        Ok(())
    }

    /// A recorded `segment_free`: the segment goes, with whatever blocks the model still
    /// had in it (the recording says it is gone; one with blocks in use is a misfit).
    fn segment_free(&mut self, addr: u64) -> Result<(), String> {
        let Some(seg) = self.segments.get(&addr).filter(|s| !s.expandable) else {
            return Err(format!("segment_free {addr:#x} of a segment not allocated"));
        };
        let (size, mut id) = (seg.size, seg.first);
        let mut busy = 0;
        while id != NONE {
            let b = self.block(id).clone();
            if b.busy() {
                busy += 1;
                self.live.remove(&b.addr);
                self.allocated -= b.size;
                self.requested -= b.requested;
            } else {
                self.remove_free(id);
            }
            self.spare.push(id);
            id = b.next;
        }
        self.segments.remove(&addr);
        self.reserved -= size;
        match busy {
            0 => Ok(()),
            n => Err(format!(
                "segment_free {addr:#x} of {size} bytes with {} in use",
                crate::units::count(n, "block")
            )),
        }
    }

    /// Maps `s`'s pages in the expandable segment of its stream holding them, or else in a
    /// new reservation from their address (of `pool`, where known: by default the large
    /// pool's where they are whole 20 MiB pages); the pages join the free blocks beside
    /// them.
    fn map_range(&mut self, s: Span, pool: Option<Pool>) -> Result<(), String> {
        let (addr, size) = (s.addr, s.size);
        let own = self
            .segment_at(addr)
            .is_some_and(|(_, seg)| seg.expandable && seg.stream == s.stream);
        if !own {
            let pool = pool.unwrap_or(if size.is_multiple_of(page_size(Pool::Large)) {
                Pool::Large
            } else {
                Pool::Small
            });
            // Another stream's reservation there ended below it (`fit_reservation`).
            let space = self.address_space(pool).max(size);
            let (at, space) = self.fit_reservation(addr, space, page_size(pool));
            if at != addr || space < size {
                return Err(format!(
                    "segment_map {addr:#x} of {size} bytes over a segment already there"
                ));
            }
            let id = self.add_segment(addr, space, s.stream, pool, true);
            self.insert_free(id);
        }
        let id = self
            .block_containing(addr)
            .filter(|&id| {
                let b = self.block(id);
                !b.mapped && b.addr.saturating_add(b.size) >= addr.saturating_add(size)
            })
            .ok_or_else(|| {
                format!("segment_map {addr:#x} of {size} bytes over pages not unmapped")
            })?;
        let id = self.isolate(id, addr, size);
        let blk = &mut self.blocks[id as usize];
        blk.mapped = true;
        let (prev, next, pool) = (blk.prev, blk.next, blk.pool);
        self.blocks[id as usize].gc_base = self.gc_now(pool);
        self.merge(id, prev);
        self.merge(id, next);
        self.insert_free(id);
        self.reserved += size;
        Ok(())
    }

    /// Unmaps `[addr, addr + size)`, which a free block must hold; a reservation with
    /// nothing mapped is given back, as PyTorch does.
    fn unmap_range(&mut self, addr: u64, size: u64) -> Result<(), String> {
        let id = self
            .block_containing(addr)
            .filter(|&id| {
                let b = self.block(id);
                b.mapped && !b.busy() && b.addr.saturating_add(b.size) >= addr.saturating_add(size)
            })
            .filter(|&id| self.block(id).expandable)
            .ok_or_else(|| {
                format!("segment_unmap {addr:#x} of {size} bytes over pages not free and mapped")
            })?;
        let id = self.isolate(id, addr, size);
        self.mark_unmapped(id, size);
        if !self.block(id).is_split() {
            let base = self.block(id).addr;
            self.remove_free(id);
            self.segments.remove(&base);
            self.spare.push(id);
        }
        Ok(())
    }

    /// Cuts `[addr, addr + size)` out of free block `id` (in its pool), which holds it; the
    /// parts before and after stay free. The cut block, out of its pool.
    fn isolate(&mut self, mut id: u32, addr: u64, size: u64) -> u32 {
        self.remove_free(id);
        let b = self.block(id).clone();
        if addr > b.addr {
            let tail = self.split_off(id, addr - b.addr);
            self.insert_free(id);
            id = tail;
        }
        if size < self.block(id).size {
            let after = self.split_off(id, size);
            self.insert_free(after);
        }
        id
    }
}
