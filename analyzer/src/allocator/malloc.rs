//! The allocation path: a cached block by best fit; else a new segment; else, on a failed
//! `cudaMalloc`, free oversize cached segments and retry, then every cached segment and
//! retry, then out of memory.

use super::device::Device;
use super::sizes::{round_size, segment_size, should_split, Pool};
use super::state::Allocator;

/// A request the allocator could not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfMemory {
    pub requested: u64,
    /// The segment it needed.
    pub segment: u64,
    pub reserved: u64,
    pub allocated: u64,
}

impl Allocator {
    /// `malloc(size, stream)`: the allocated block.
    pub fn malloc(
        &mut self,
        dev: &mut dyn Device,
        requested: u64,
        stream: u64,
    ) -> Result<u32, OutOfMemory> {
        let size = round_size(requested, &self.settings);
        let pool = Pool::of_size(size);
        let segment = segment_size(size);
        let mut found = self.get_free_block(pool, stream, size);
        if found.is_none() {
            if self.gc_enabled() {
                self.garbage_collect(dev);
            }
            found = self.alloc_segment(dev, pool, stream, segment, size);
            if found.is_none() && self.release_available(dev, pool, stream, size) {
                found = self.alloc_segment(dev, pool, stream, segment, size);
            }
            if found.is_none() {
                self.release_cached(dev);
                found = self.alloc_segment(dev, pool, stream, segment, size);
            }
        }
        let Some(id) = found else {
            return Err(OutOfMemory {
                requested,
                segment,
                reserved: self.reserved,
                allocated: self.allocated,
            });
        };
        let split = should_split(pool, self.block(id).size, size, &self.settings);
        Ok(self.take_block(id, size, requested, split))
    }

    /// Whether a request would be served from the cache, without changing anything.
    pub fn would_reuse(&self, requested: u64, stream: u64) -> bool {
        let size = round_size(requested, &self.settings);
        self.find_free_block(Pool::of_size(size), stream, size)
            .is_some()
    }

    /// The program frees the block at `addr`; `pending`: the block waits for other streams
    /// (`record_stream`) and is freed at a later `complete_free`.
    pub fn free(&mut self, addr: u64, pending: bool) -> Option<u32> {
        let id = self.live_block(addr)?;
        if pending {
            self.blocks[id as usize].pending_free = true;
        } else {
            self.free_block(id);
        }
        Some(id)
    }
}
