//! The free blocks of each pool, ordered by (stream, size, address): best fit takes the
//! smallest block of the request's stream that is large enough, the lowest address first.
//! Unmapped address space of expandable segments is kept apart, by (stream, address).

use super::blocks::NONE;
use super::sizes::Pool;
use super::state::Allocator;

/// Key of a free block in its pool.
pub type FreeKey = (u64, u64, u64);

impl Allocator {
    pub(super) fn pool_index(pool: Pool) -> usize {
        match pool {
            Pool::Small => 0,
            Pool::Large => 1,
        }
    }

    fn key(&self, id: u32) -> (usize, FreeKey) {
        let b = self.block(id);
        (Self::pool_index(b.pool), (b.stream, b.size, b.addr))
    }

    pub(super) fn insert_free(&mut self, id: u32) {
        let (p, k) = self.key(id);
        if self.block(id).mapped {
            self.free[p].insert(k, id);
            self.free_at.insert(k.2, id);
        } else {
            self.unmapped[p].insert((k.0, k.2), id);
        }
    }

    pub(super) fn remove_free(&mut self, id: u32) {
        let (p, k) = self.key(id);
        if self.block(id).mapped {
            self.free[p].remove(&k);
            self.free_at.remove(&k.2);
        } else {
            self.unmapped[p].remove(&(k.0, k.2));
        }
    }

    /// Free blocks of `pool`, in best-fit order.
    pub fn free_blocks(&self, pool: Pool) -> impl DoubleEndedIterator<Item = u32> + '_ {
        self.free[Self::pool_index(pool)].values().copied()
    }

    /// The first free block of `stream` in `pool` at least `size` bytes, by best fit.
    pub(super) fn lower_bound(&self, pool: Pool, stream: u64, size: u64) -> Option<u32> {
        self.free[Self::pool_index(pool)]
            .range((stream, size, 0)..)
            .next()
            .filter(|(k, _)| k.0 == stream)
            .map(|(_, &id)| id)
    }

    /// The cached block a request of `size` bytes (rounded) would take, if any: best fit,
    /// except that an oversize block (`max_split_size` and over) never serves a smaller
    /// request, and serves an oversize one only if at most `max_non_split_rounding` larger.
    /// A block of an expandable segment counts, with expandable segments on, as large as it
    /// can grow (its size plus the unmapped space after it), so larger blocks that can grow
    /// less are taken before it; with them off, it is passed over (`get_free_block`).
    pub(super) fn find_free_block(&self, pool: Pool, stream: u64, size: u64) -> Option<u32> {
        let mut id = self.lower_bound(pool, stream, size)?;
        if self.block(id).expandable {
            let mut after = self.free[Self::pool_index(pool)]
                .range((stream, size, 0)..)
                .skip(1)
                .take_while(|(k, _)| k.0 == stream)
                .map(|(_, &id)| id);
            if self.settings.expandable_segments {
                for next in after {
                    if !self.block(id).expandable
                        || self.expandable_size(next) >= self.expandable_size(id)
                    {
                        break;
                    }
                    id = next;
                }
            } else {
                id = after.find(|&b| !self.block(b).expandable)?;
            }
        }
        let block = self.block(id).size;
        let max_split = self.settings.max_split_size;
        if size < max_split && block >= max_split {
            return None;
        }
        if size >= max_split && block >= size.saturating_add(self.settings.max_non_split_rounding) {
            return None;
        }
        Some(id)
    }

    /// A free block's size plus the unmapped address space right after it.
    fn expandable_size(&self, id: u32) -> u64 {
        let b = self.block(id);
        let grow = match b.next {
            NONE => 0,
            n if !self.block(n).mapped => self.block(n).size,
            _ => 0,
        };
        b.size + grow
    }

    /// Takes the best-fit block out of the pool; counts the search for block ages.
    pub(super) fn get_free_block(&mut self, pool: Pool, stream: u64, size: u64) -> Option<u32> {
        if self.gc_enabled() {
            self.gc_calls[Self::pool_index(pool)] += 1;
        }
        let id = self.find_free_block(pool, stream, size)?;
        self.remove_free(id);
        if self.gc_enabled() {
            self.blocks[id as usize].gc_base = self.gc_calls[Self::pool_index(pool)];
        }
        Some(id)
    }

    /// How many best-fit searches of its pool a free block has sat through unused.
    pub(super) fn gc_age(&self, id: u32) -> u64 {
        let b = self.block(id);
        self.gc_calls[Self::pool_index(b.pool)].saturating_sub(b.gc_base)
    }

    pub(super) fn gc_now(&self, pool: Pool) -> u64 {
        self.gc_calls[Self::pool_index(pool)]
    }
}
