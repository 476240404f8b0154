//! `expandable_segments:True` (PyTorch's `ExpandableSegment`, `find_expandable_block`,
//! `map_block`, `unmap_block`): per stream and pool, one reservation of address space of
//! 1 1/8 the card, into which pages (2 MiB in the small pool, 20 MiB in the large one) are
//! mapped as requests need them, at the lowest address where the free and unmapped space
//! fits the request; when memory runs short, the wholly free pages of free blocks are
//! unmapped, and a reservation with nothing mapped is given back.

use super::blocks::NONE;
use super::device::Device;
use super::sizes::{Pool, LARGE_BUFFER, SMALL_BUFFER};
use super::state::Span;
use super::state::{Allocator, Change};

/// The page an expandable segment of `pool` maps at a time.
pub fn page_size(pool: Pool) -> u64 {
    match pool {
        Pool::Small => SMALL_BUFFER,
        Pool::Large => LARGE_BUFFER,
    }
}

impl Allocator {
    /// The address space a reservation spans: the card and an eighth, in whole pages. A
    /// card is taken as 64 TiB at most, so that no sum of addresses can overflow.
    pub(super) fn address_space(&self, pool: Pool) -> u64 {
        let page = page_size(pool);
        let card = self.card_total.min(1 << 46);
        (card + card / 8).div_ceil(page) * page
    }

    /// `try_allocate_expandable_block`: a free block of at least `size` bytes, mapped as
    /// needed, out of its pool; `None` when the driver has no memory for the pages (the
    /// pages mapped before that stay mapped, as in PyTorch).
    pub(super) fn alloc_expandable(
        &mut self,
        dev: &mut dyn Device,
        pool: Pool,
        stream: u64,
        size: u64,
    ) -> Option<u32> {
        let mut c = self.find_expandable_block(dev, pool, stream, size);
        if !self.block(c).mapped {
            let want = self.block(c).size.min(size);
            c = self.map_block(dev, c, want)?;
        }
        while self.block(c).size < size {
            let remaining = size - self.block(c).size;
            let next = self.block(c).next;
            // Unmapped space follows, as the search found; a reservation cut short by a
            // recorded one (fit_reservation) may lack it: the replay drifts there.
            if next == NONE || self.block(next).mapped {
                return None;
            }
            let want = self.block(next).size.min(remaining);
            c = self.map_block(dev, next, want)?;
        }
        self.remove_free(c);
        Some(c)
    }

    /// The lowest unmapped block of the stream's pool that, with the free block before it
    /// and the free or unmapped ones after it, spans `size` bytes; else a new reservation.
    fn find_expandable_block(
        &mut self,
        dev: &mut dyn Device,
        pool: Pool,
        stream: u64,
        size: u64,
    ) -> u32 {
        let p = Self::pool_index(pool);
        let candidates: Vec<u32> = self.unmapped[p]
            .range((stream, 0)..)
            .take_while(|(k, _)| k.0 == stream)
            .map(|(_, &id)| id)
            .collect();
        for mut c in candidates {
            let prev = self.block(c).prev;
            if prev != NONE && !self.block(prev).busy() {
                c = prev;
            }
            let (mut bytes, mut b) = (0, c);
            while bytes < size && b != NONE && !self.block(b).busy() {
                bytes += self.block(b).size;
                b = self.block(b).next;
            }
            if bytes >= size {
                return c;
            }
        }
        let space = self.address_space(pool);
        let addr = dev.reserve(space);
        let (addr, space) = self.fit_reservation(addr, space, page_size(pool));
        let id = self.add_segment(addr, space, stream, pool, true);
        self.insert_free(id);
        id
    }

    /// Where a reservation of `space` bytes at `addr` fits among the others. The card the
    /// model assumes may be larger than the recorded run's, so its reservations reach too
    /// far: a recorded reservation inside the unmapped tail of another shows where that
    /// one ended, and one below another ends where it starts. Anything else is a recorded
    /// address the replay holds otherwise: it has drifted (its next map says so), and the
    /// new reservation goes above every segment.
    pub(super) fn fit_reservation(&mut self, addr: u64, space: u64, page: u64) -> (u64, u64) {
        if let Some((base, seg)) = self.segment_at(addr) {
            let (first, expandable) = (seg.first, seg.expandable);
            let mut tail = first;
            while self.block(tail).next != NONE {
                tail = self.block(tail).next;
            }
            let t = self.block(tail).clone();
            if !expandable || t.mapped || addr < t.addr {
                return (self.above_all(), space);
            }
            let end = base + (addr - base) / page * page;
            self.remove_free(tail);
            if end > t.addr {
                self.blocks[tail as usize].size = end - t.addr;
                self.insert_free(tail);
            } else if t.prev != NONE {
                self.blocks[t.prev as usize].next = NONE;
                self.spare.push(tail);
            } else {
                // Nothing of it was ever mapped: it is gone.
                self.segments.remove(&base);
                self.spare.push(tail);
            }
            if let Some(s) = self.segments.get_mut(&base) {
                s.size = end - base;
            }
        }
        let above = self.segments.range(addr..).next().map(|(&a, _)| a);
        match above {
            Some(next) if next < addr.saturating_add(space) => {
                let cut = (next - addr) / page * page;
                if cut > 0 {
                    return (addr, cut);
                }
                (self.above_all(), space)
            }
            _ => (addr, space),
        }
    }

    /// An address above every segment.
    fn above_all(&self) -> u64 {
        let top = self.segments.iter().map(|(&a, s)| a + s.size).max();
        top.unwrap_or(0).div_ceil(SMALL_BUFFER) * SMALL_BUFFER
    }

    /// Maps the pages covering the first `size` bytes of unmapped block `id`, which then
    /// merges with the free blocks beside it; the merged free block, in its pool.
    fn map_block(&mut self, dev: &mut dyn Device, id: u32, size: u64) -> Option<u32> {
        let b = self.block(id).clone();
        let mapped = size.div_ceil(page_size(b.pool)) * page_size(b.pool);
        if !dev.map(b.addr, mapped, self.reserved) {
            return None;
        }
        self.remove_free(id);
        if mapped < b.size {
            let rest = self.split_off(id, mapped);
            self.insert_free(rest);
        }
        let blk = &mut self.blocks[id as usize];
        blk.mapped = true;
        blk.size = mapped;
        let (prev, next) = (blk.prev, blk.next);
        self.merge(id, prev);
        self.merge(id, next);
        self.blocks[id as usize].gc_base = self.gc_now(b.pool);
        self.insert_free(id);
        self.reserved += mapped;
        self.changes.push(Change::SegmentMap(Span {
            addr: b.addr,
            size: mapped,
            stream: b.stream,
        }));
        Some(id)
    }

    /// Unmaps the whole pages inside free block `id` (the parts before and after them stay
    /// free blocks); gives the reservation back when nothing of it is mapped any more.
    pub(super) fn unmap_block(&mut self, dev: &mut dyn Device, mut id: u32) {
        let b = self.block(id).clone();
        let Some((base, _)) = self.segment_at(b.addr) else {
            return;
        };
        let page = page_size(b.pool);
        let begin = base + (b.addr - base).div_ceil(page) * page;
        let end = base + (b.addr + b.size - base) / page * page;
        if begin >= end {
            return;
        }
        self.remove_free(id);
        if begin > b.addr {
            // The part before the first whole page stays a free block.
            let rest = self.split_off(id, begin - b.addr);
            self.insert_free(id);
            id = rest;
        }
        if end < b.addr + b.size {
            let after = self.split_off(id, end - begin);
            self.insert_free(after);
        }
        self.mark_unmapped(id, end - begin);
        dev.unmap(begin, end - begin);
        self.changes.push(Change::SegmentUnmap(Span {
            addr: begin,
            size: end - begin,
            stream: b.stream,
        }));
        if !self.block(id).is_split() {
            // Nothing mapped: `release_expandable_segment`, which the trace does not show.
            let addr = self.block(id).addr;
            self.remove_free(id);
            self.segments.remove(&addr);
            self.spare.push(id);
            dev.release(addr);
        }
    }
}

impl Allocator {
    /// Marks block `id` (`size` bytes of whole pages) unmapped: it joins the unmapped
    /// blocks beside it and leaves reserved memory.
    pub(super) fn mark_unmapped(&mut self, id: u32, size: u64) {
        self.blocks[id as usize].mapped = false;
        let blk = &self.blocks[id as usize];
        let (prev, next) = (blk.prev, blk.next);
        self.merge(id, prev);
        self.merge(id, next);
        self.insert_free(id);
        self.reserved -= size;
    }
}
