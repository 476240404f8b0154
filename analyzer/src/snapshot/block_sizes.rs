//! The block size of a tensor a snapshot's history gives only the requested size of, as
//! `torch.cuda.memory_allocated()` counts it: read off the layout of the segments at the
//! moment of the `alloc`.
//!
//! The caching allocator hands out the start of a free block and splits off the rest only
//! when the rest is worth keeping (small pool: 512 bytes or more; large pool: more than
//! 1 MiB, and the request under `max_split_size`), so a block is either the rounded
//! request or the whole free block it came from. Free neighbours always merge, so that
//! free block runs from the `alloc`'s address to the next allocated block (a tensor counts
//! as allocated until its `free_completed`) or to the segment's end. The history holds
//! every segment and every allocation, so the free block is known exactly. Checked on the
//! real snapshots: every block still alive at the end comes out at the size the final
//! segments give it.
//!
//! Not inferred (left unknown): expandable segments, whose free blocks span pages mapped
//! at different times, and an `alloc` outside every known segment.

use crate::allocator::sizes::{round_size, should_split, Pool, MIN_BLOCK_SIZE, SMALL_SIZE};
use crate::allocator::Settings;
use std::collections::{BTreeMap, BTreeSet};

pub struct Layout {
    /// Live segments: address -> size.
    segments: BTreeMap<u64, u64>,
    /// Start addresses of allocated blocks.
    blocks: BTreeSet<u64>,
    /// None: the sizes cannot be inferred (expandable segments, unreadable settings).
    settings: Option<Settings>,
}

impl Layout {
    /// `settings`: the snapshot's `allocator_settings`, `expandable`: whether any segment
    /// is expandable.
    pub fn new(
        recorded: Option<&serde_json::Map<String, serde_json::Value>>,
        expandable: bool,
    ) -> Layout {
        let settings = Settings::from_recorded(recorded)
            .ok()
            .filter(|s| !expandable && !s.expandable_segments);
        Layout {
            segments: BTreeMap::new(),
            blocks: BTreeSet::new(),
            settings,
        }
    }

    pub fn segment_alloc(&mut self, addr: u64, size: u64) {
        self.segments.insert(addr, size);
    }

    pub fn segment_free(&mut self, addr: u64) {
        self.segments.remove(&addr);
    }

    /// A block already allocated (its size known or not).
    pub fn taken(&mut self, addr: u64) {
        self.blocks.insert(addr);
    }

    pub fn free(&mut self, addr: u64) {
        self.blocks.remove(&addr);
    }

    /// Bytes from `addr` to the next allocated block or its segment's end: the free block
    /// it starts (None outside every segment).
    fn room(&self, addr: u64) -> Option<u64> {
        let (&start, &size) = self.segments.range(..=addr).next_back()?;
        let end = start.checked_add(size)?;
        if addr >= end {
            return None;
        }
        let next = self
            .blocks
            .range(addr.saturating_add(1)..end)
            .next()
            .copied()
            .unwrap_or(end);
        Some(next - addr)
    }

    /// An `alloc` of `requested` bytes at `addr`: its block size (0: not known). The block
    /// is then allocated.
    pub fn alloc(&mut self, addr: u64, requested: u64) -> u64 {
        let size = self.infer(addr, requested);
        self.blocks.insert(addr);
        size
    }

    fn infer(&self, addr: u64, requested: u64) -> u64 {
        let (Some(settings), Some(free)) = (&self.settings, self.room(addr)) else {
            return 0;
        };
        let rounded = round_size(requested, settings);
        if rounded > free {
            // The history and the layout disagree: no guess.
            return 0;
        }
        let pool = Pool::of_size(rounded);
        if should_split(pool, free, rounded, settings) {
            rounded
        } else {
            free
        }
    }

    /// A tensor alive before the history began (the allocated blocks all marked with
    /// [`Layout::taken`]): its block is the rounded request, or more, up to the next
    /// allocated block. Known only when the room left over is too small to be a free
    /// block of its own (small pool: under 512 bytes; large: 1 MiB or less, since every
    /// large-pool block is larger), so the block must take it all; 0 otherwise.
    pub fn before_history(&self, addr: u64, requested: u64) -> u64 {
        let (Some(settings), Some(room)) = (&self.settings, self.room(addr)) else {
            return 0;
        };
        let rounded = round_size(requested, settings);
        let least_free = match Pool::of_size(rounded) {
            Pool::Small => MIN_BLOCK_SIZE,
            Pool::Large => SMALL_SIZE + 1,
        };
        if rounded <= room && room - rounded < least_free {
            room
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn split_or_whole_free_block() {
        let mut l = Layout::new(None, false);
        l.segment_alloc(0, 20 * MIB);
        // 1.5 MiB from a fresh 20 MiB segment: split, the rest stays free.
        assert_eq!(l.alloc(0, 3 * MIB / 2), 3 * MIB / 2);
        // 18 MiB of the 18.5 left: 0.5 MiB would remain, too little to split off.
        assert_eq!(l.alloc(3 * MIB / 2, 18 * MIB), 37 * MIB / 2);
        // A small request rounds to 512 bytes; in a 2 MiB segment the rest splits off.
        l.segment_alloc(100 * MIB, 2 * MIB);
        assert_eq!(l.alloc(100 * MIB, 1), 512);
        // Outside every segment: not known.
        assert_eq!(l.alloc(50 * MIB, 4096), 0);
    }

    #[test]
    fn before_the_history_only_when_the_rest_cannot_be_free() {
        let mut l = Layout::new(None, false);
        l.segment_alloc(0, 20 * MIB);
        l.taken(0);
        l.taken(19 * MIB + MIB / 2);
        // 19.5 MiB of room for 19 MiB: the 0.5 MiB cannot be a large free block.
        assert_eq!(l.before_history(0, 19 * MIB), 19 * MIB + MIB / 2);
        // For 2 MiB, 17.5 MiB could be free or not: unknown.
        assert_eq!(l.before_history(0, 2 * MIB), 0);
    }

    #[test]
    fn expandable_segments_are_not_inferred() {
        let mut l = Layout::new(None, true);
        l.segment_alloc(0, 20 * MIB);
        assert_eq!(l.alloc(0, 3 * MIB / 2), 0);
    }

    #[test]
    fn a_request_of_2_to_the_64_less_1_fits_no_block() {
        // A crafted `alloc` size: rounding it up to 512 bytes overflowed (every view
        // aborted); it fits no free block, so its size is not known.
        let mut l = Layout::new(None, false);
        l.segment_alloc(4096, 2 * MIB);
        assert_eq!(l.alloc(4096, u64::MAX), 0);
        let mut l = Layout::new(None, false);
        l.segment_alloc(4096, 2 * MIB);
        l.taken(4096);
        assert_eq!(l.before_history(4096, u64::MAX), 0);
    }
}
