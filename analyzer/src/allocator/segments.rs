//! Segments come from the driver and go back to it: a new segment when no cached block
//! fits, and the release of whole cached segments when memory runs short, when the
//! garbage collector finds them idle, or at `empty_cache`.

use super::device::Device;
use super::sizes::Pool;
use super::state::Span;
use super::state::{Allocator, Change};

impl Allocator {
    /// `cudaMalloc` of a segment of `size` bytes for `pool`; its free block on success. A
    /// memory fraction caps the reserved bytes before the driver is asked (by the segment
    /// size, even where an expandable segment maps less). With expandable segments, the
    /// pages a block of `block_size` bytes needs are mapped instead.
    pub(super) fn alloc_segment(
        &mut self,
        dev: &mut dyn Device,
        pool: Pool,
        stream: u64,
        size: u64,
        block_size: u64,
    ) -> Option<u32> {
        if let Some(max) = self.allowed_maximum {
            if self.reserved + size > max {
                return None;
            }
        }
        if self.settings.expandable_segments {
            return self.alloc_expandable(dev, pool, stream, block_size);
        }
        let addr = dev.malloc(size, self.reserved)?;
        self.changes
            .push(Change::SegmentAlloc(Span { addr, size, stream }));
        Some(self.add_segment(addr, size, stream, pool, false))
    }

    /// Returns the whole-segment free block `id` to the driver.
    pub(super) fn release_segment(&mut self, dev: &mut dyn Device, id: u32) {
        let b = self.block(id).clone();
        debug_assert!(!b.is_split() && !b.busy());
        self.remove_free(id);
        self.segments.remove(&b.addr);
        self.reserved -= b.size;
        self.spare.push(id);
        dev.free(b.addr, b.size);
        self.changes.push(Change::SegmentFree(Span {
            addr: b.addr,
            size: b.size,
            stream: b.stream,
        }));
    }

    /// After a failed `cudaMalloc` under `max_split_size`: frees the smallest oversize
    /// cached segment of the stream that covers the request, or else the largest ones
    /// until their sizes add up to it. Whether any was freed.
    pub(super) fn release_available(
        &mut self,
        dev: &mut dyn Device,
        pool: Pool,
        stream: u64,
        size: u64,
    ) -> bool {
        let max_split = self.settings.max_split_size;
        if max_split == u64::MAX {
            return false;
        }
        let want = size.max(max_split);
        if let Some(id) = self.lower_bound(pool, stream, want) {
            self.release_segment(dev, id);
            return true;
        }
        // The stream's blocks from the largest down, while they are oversize.
        let candidates: Vec<u32> = self
            .free_blocks(pool)
            .rev()
            .skip_while(|&id| self.block(id).stream > stream)
            .take_while(|&id| {
                let b = self.block(id);
                b.stream == stream && b.size >= max_split
            })
            .collect();
        let mut released = 0;
        for id in candidates {
            if released >= want {
                break;
            }
            released += self.block(id).size;
            // An oversize block is never split, so it is a whole segment.
            if !self.block(id).is_split() {
                self.release_segment(dev, id);
            }
        }
        released >= want
    }

    /// `empty_cache()`, and the last resort before out-of-memory: waits for every pending
    /// free, then frees every cached segment that is wholly free, large pool first, each
    /// pool in (stream, size, address) order; then unmaps the whole pages of each free
    /// block of an expandable segment, in the same order.
    pub fn release_cached(&mut self, dev: &mut dyn Device) {
        let pending: Vec<u32> = self
            .live
            .values()
            .copied()
            .filter(|&id| self.block(id).pending_free)
            .collect();
        let mut pending: Vec<(u64, u32)> = pending
            .into_iter()
            .map(|id| (self.block(id).addr, id))
            .collect();
        pending.sort_unstable();
        for (_, id) in pending {
            let b = self.block(id).clone();
            self.changes.push(Change::FreeCompleted(Span {
                addr: b.addr,
                size: b.requested,
                stream: b.stream,
            }));
            self.free_block(id);
        }
        for pool in [Pool::Large, Pool::Small] {
            let (expandable, whole): (Vec<u32>, Vec<u32>) = self
                .free_blocks(pool)
                .filter(|&id| self.block(id).expandable || !self.block(id).is_split())
                .partition(|&id| self.block(id).expandable);
            for id in whole {
                self.release_segment(dev, id);
            }
            for id in expandable {
                self.unmap_block(dev, id);
            }
        }
    }

    /// `garbage_collection_threshold`: above that share of the allowed memory, frees cached
    /// whole segments of the large pool that sat unused for at least the average age,
    /// again while the target is not reached and something was freed.
    pub(super) fn garbage_collect(&mut self, dev: &mut dyn Device) {
        let Some(max) = self.allowed_maximum else {
            return;
        };
        let threshold = (self.settings.garbage_collection_threshold * max as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let freeable = |a: &Allocator| -> Vec<u32> {
            // A block of an expandable segment is never a whole segment: unmapped space
            // follows it.
            a.free_blocks(Pool::Large)
                .filter(|&id| !a.block(id).is_split() && !a.block(id).expandable)
                .collect()
        };
        let mut total_age: u64 = freeable(self).iter().map(|&id| self.gc_age(id)).sum();
        let mut count = freeable(self).len() as u64;
        let mut reclaimed = 0;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let threshold_age = total_age as f64 / count as f64;
            freed = false;
            for id in freeable(self) {
                let age = self.gc_age(id);
                if age as f64 >= threshold_age {
                    freed = true;
                    reclaimed += self.block(id).size;
                    total_age -= age;
                    count -= 1;
                    self.release_segment(dev, id);
                }
            }
        }
    }
}
