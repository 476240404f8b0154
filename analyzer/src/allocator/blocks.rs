//! Blocks and the segments they tile: an arena of blocks linked to their neighbours in
//! address order, split when a free block serves a smaller request and merged with free
//! neighbours when freed.

use super::sizes::Pool;
use super::state::Allocator;

/// No neighbour.
pub const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    /// Bytes the caller asked for (allocated blocks).
    pub requested: u64,
    pub stream: u64,
    pub pool: Pool,
    pub allocated: bool,
    /// Freed by the program, waiting for the streams that used it: not yet mergeable.
    pub pending_free: bool,
    pub prev: u32,
    pub next: u32,
    /// The pool's count of best-fit searches when the block was last used: its age for
    /// `garbage_collection_threshold`.
    pub gc_base: u64,
    /// Backed by memory. Only blocks of an expandable segment can be unmapped: address
    /// space reserved but not mapped, in whole pages.
    pub mapped: bool,
    /// Part of an expandable segment.
    pub expandable: bool,
}

impl Block {
    /// Part of a segment that holds other blocks too.
    pub fn is_split(&self) -> bool {
        self.prev != NONE || self.next != NONE
    }

    pub fn busy(&self) -> bool {
        self.allocated || self.pending_free
    }
}

impl Allocator {
    pub fn block(&self, id: u32) -> &Block {
        &self.blocks[id as usize]
    }

    pub(super) fn new_block(&mut self, b: Block) -> u32 {
        if let Some(id) = self.spare.pop() {
            self.blocks[id as usize] = b;
            id
        } else {
            self.blocks.push(b);
            (self.blocks.len() - 1) as u32
        }
    }

    /// Takes free block `id` out of its pool for a request of `size` bytes (already rounded),
    /// splitting off the rest as a free block at the higher addresses when `split`.
    pub(super) fn take_block(&mut self, id: u32, size: u64, requested: u64, split: bool) -> u32 {
        let id = if split {
            let rest = self.blocks[id as usize].clone();
            let head = self.new_block(Block {
                size,
                next: id,
                ..rest.clone()
            });
            if rest.prev != NONE {
                self.blocks[rest.prev as usize].next = head;
            }
            self.retarget_segment(rest.addr, head);
            let r = &mut self.blocks[id as usize];
            r.prev = head;
            r.addr += size;
            r.size -= size;
            self.insert_free(id);
            head
        } else {
            id
        };
        let b = &mut self.blocks[id as usize];
        b.allocated = true;
        b.pending_free = false;
        b.requested = requested;
        self.allocated += b.size;
        self.requested += requested;
        self.live.insert(b.addr, id);
        id
    }

    /// Returns allocated block `id` to its pool, merged with free neighbours.
    pub(super) fn free_block(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        debug_assert!(b.allocated);
        b.allocated = false;
        b.pending_free = false;
        self.allocated -= b.size;
        self.requested -= b.requested;
        let addr = b.addr;
        self.live.remove(&addr);
        let (prev, next, pool) = (b.prev, b.next, b.pool);
        // A freed block starts its age afresh; merging keeps the freed block's age.
        self.blocks[id as usize].gc_base = self.gc_now(pool);
        self.merge(id, prev);
        self.merge(id, next);
        self.insert_free(id);
    }

    /// Absorbs neighbour `src` into `dst` if it is free and mapped alike (PyTorch's
    /// `try_merge_blocks`: mapped and unmapped address space never merge).
    pub(super) fn merge(&mut self, dst: u32, src: u32) {
        if src == NONE
            || self.blocks[src as usize].busy()
            || self.blocks[src as usize].mapped != self.blocks[dst as usize].mapped
        {
            return;
        }
        self.remove_free(src);
        let s = self.blocks[src as usize].clone();
        if self.blocks[dst as usize].prev == src {
            let d = &mut self.blocks[dst as usize];
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NONE {
                self.blocks[s.prev as usize].next = dst;
            }
            self.retarget_segment(s.addr, dst);
        } else {
            self.blocks[dst as usize].next = s.next;
            if s.next != NONE {
                self.blocks[s.next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s.size;
        self.spare.push(src);
    }

    /// If `addr` starts a segment, its first block is now `id`.
    pub(super) fn retarget_segment(&mut self, addr: u64, id: u32) {
        if let Some(seg) = self.segments.get_mut(&addr) {
            seg.first = id;
        }
    }
}
