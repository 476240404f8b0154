//! The state of one device's caching allocator: its segments, its blocks, the free blocks
//! of each pool, and the totals; and what changed at the driver, in order, for the replay.

use super::blocks::{Block, NONE};
use super::pools::FreeKey;
use super::settings::Settings;
use super::sizes::Pool;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The card assumed for the address space of expandable segments when none is given: 80 GiB.
pub const DEFAULT_CARD: u64 = 80 << 30;

#[derive(Debug, Clone)]
pub struct SegmentInfo {
    pub size: u64,
    pub stream: u64,
    pub pool: Pool,
    /// The block at the segment's start.
    pub first: u32,
    /// An expandable segment: `size` is the address space reserved, mapped in pages.
    pub expandable: bool,
}

/// A segment as a snapshot shows it: for an expandable segment, a run of mapped pages.
#[derive(Debug)]
pub struct SegmentView<'a> {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: Pool,
    pub expandable: bool,
    pub blocks: Vec<&'a Block>,
}

/// An address range on a stream: a segment, or a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
}

/// What the allocator did besides serving a request, in the order it did it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    SegmentAlloc(Span),
    SegmentFree(Span),
    /// Pages mapped into, or unmapped from, an expandable segment.
    SegmentMap(Span),
    SegmentUnmap(Span),
    /// A pending free completed early: the allocator waited for the block's streams before
    /// releasing cached memory.
    FreeCompleted(Span),
}

/// A block of the state at the start of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartBlock {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub pending_free: bool,
    /// Allocated before a history and freed inside it: known by its free only.
    pub freed_inside: bool,
}

/// A segment at the start of a replay, with its allocated blocks; the rest of it is free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartSegment {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// The pool its blocks belong to (a snapshot's `segment_type`).
    pub pool: Pool,
    pub blocks: Vec<StartBlock>,
    /// A run of mapped pages of an expandable segment.
    pub expandable: bool,
}

#[derive(Debug)]
pub struct Allocator {
    pub settings: Settings,
    pub(super) blocks: Vec<Block>,
    pub(super) spare: Vec<u32>,
    pub(super) free: [BTreeMap<FreeKey, u32>; 2],
    /// Unmapped blocks of expandable segments, by (stream, address).
    pub(super) unmapped: [BTreeMap<(u64, u64), u32>; 2],
    /// Free mapped blocks by address, both pools: where a recorded `alloc` is followed.
    pub(super) free_at: FxHashMap<u64, u32>,
    /// The card's memory, which sizes the address space an expandable segment reserves.
    pub(super) card_total: u64,
    pub(super) segments: BTreeMap<u64, SegmentInfo>,
    /// Allocated (and pending-free) blocks by address.
    pub(super) live: FxHashMap<u64, u32>,
    /// Bytes in segments.
    pub reserved: u64,
    /// Bytes in allocated and pending-free blocks.
    pub allocated: u64,
    /// Bytes the program asked for, of `allocated`.
    pub requested: u64,
    pub(super) gc_calls: [u64; 2],
    /// `per_process_memory_fraction` of the card, when both are known.
    pub allowed_maximum: Option<u64>,
    pub changes: Vec<Change>,
}

impl Allocator {
    pub fn new(settings: Settings, card_capacity: Option<u64>) -> Allocator {
        let allowed_maximum = match (settings.per_process_memory_fraction, card_capacity) {
            (Some(f), Some(c)) => Some((f * c as f64) as u64),
            _ => None,
        };
        Allocator {
            settings,
            blocks: Vec::new(),
            spare: Vec::new(),
            free: [BTreeMap::new(), BTreeMap::new()],
            unmapped: [BTreeMap::new(), BTreeMap::new()],
            free_at: FxHashMap::default(),
            card_total: card_capacity.unwrap_or(DEFAULT_CARD),
            segments: BTreeMap::new(),
            live: FxHashMap::default(),
            reserved: 0,
            allocated: 0,
            requested: 0,
            gc_calls: [0; 2],
            allowed_maximum,
            changes: Vec::new(),
        }
    }

    /// Garbage collection runs only under a memory fraction, as in PyTorch.
    pub(super) fn gc_enabled(&self) -> bool {
        self.allowed_maximum.is_some() && self.settings.garbage_collection_threshold > 0.0
    }

    /// Adds a segment with one free block covering it (for an expandable segment, one
    /// unmapped block: address space only); returns that block, not yet in its pool.
    pub(super) fn add_segment(
        &mut self,
        addr: u64,
        size: u64,
        stream: u64,
        pool: Pool,
        expandable: bool,
    ) -> u32 {
        let gc_base = self.gc_now(pool);
        let id = self.new_block(Block {
            addr,
            size,
            requested: 0,
            stream,
            pool,
            allocated: false,
            pending_free: false,
            prev: NONE,
            next: NONE,
            gc_base,
            mapped: !expandable,
            expandable,
        });
        self.segments.insert(
            addr,
            SegmentInfo {
                size,
                stream,
                pool,
                first: id,
                expandable,
            },
        );
        if !expandable {
            self.reserved += size;
        }
        id
    }

    /// Lays out a segment of the starting state: its allocated blocks where they were, the
    /// gaps between them free. Blocks must lie inside the segment, in address order.
    pub fn load_segment(&mut self, seg: &StartSegment) -> Result<(), String> {
        if seg.expandable {
            return Err(format!(
                "segment {:#x}: an expandable segment at the start of a replay",
                seg.addr
            ));
        }
        // The free block covering the rest of the segment, not yet in the pool.
        let rest = self.add_segment(seg.addr, seg.size, seg.stream, seg.pool, false);
        self.carve(rest, seg)
    }

    /// Lays `seg`'s blocks into the free block `rest` (out of its pool), which holds them
    /// all: the blocks allocated where they were, the gaps between them free.
    pub(super) fn carve(&mut self, rest: u32, seg: &StartSegment) -> Result<(), String> {
        let mut rest = Some(rest);
        for b in &seg.blocks {
            let c = rest
                .map(|id| self.block(id).clone())
                .filter(|c| b.addr >= c.addr && b.addr.saturating_add(b.size) <= c.addr + c.size)
                .ok_or_else(|| {
                    format!(
                        "segment {:#x} ({} bytes): block {:#x} ({} bytes) overlaps another or lies outside",
                        seg.addr, seg.size, b.addr, b.size
                    )
                })?;
            let mut at = rest.unwrap_or(NONE);
            if b.addr > c.addr {
                let tail = self.split_off(at, b.addr - c.addr);
                self.insert_free(at);
                at = tail;
            }
            rest = (self.block(at).size > b.size).then(|| self.split_off(at, b.size));
            let blk = &mut self.blocks[at as usize];
            blk.allocated = true;
            blk.pending_free = b.pending_free;
            blk.requested = b.requested;
            self.allocated += b.size;
            self.requested += b.requested;
            self.live.insert(b.addr, at);
        }
        if let Some(id) = rest {
            self.insert_free(id);
        }
        Ok(())
    }

    /// Takes the free blocks of the segment at `addr` out of the pools: they are served to
    /// no request (a private pool's, which the model does not replay).
    pub fn withhold_free_blocks(&mut self, addr: u64) {
        let Some(seg) = self.segments.get(&addr) else {
            return;
        };
        let mut id = seg.first;
        while id != NONE {
            if !self.block(id).busy() {
                self.remove_free(id);
            }
            id = self.block(id).next;
        }
    }

    /// Cuts block `id` (not in a pool) after `size` bytes; returns the new block after it.
    pub(super) fn split_off(&mut self, id: u32, size: u64) -> u32 {
        let b = self.block(id).clone();
        let tail = self.new_block(Block {
            addr: b.addr + size,
            size: b.size - size,
            prev: id,
            ..b
        });
        if b.next != NONE {
            self.blocks[b.next as usize].prev = tail;
        }
        let h = &mut self.blocks[id as usize];
        h.size = size;
        h.next = tail;
        tail
    }

    /// Addresses of the allocated (and pending-free) blocks.
    pub fn live_addresses(&self) -> impl Iterator<Item = u64> + '_ {
        self.live.keys().copied()
    }

    /// The live block at `addr`.
    pub fn live_block(&self, addr: u64) -> Option<u32> {
        self.live.get(&addr).copied()
    }

    /// Segments in address order, each with its blocks in address order, as a snapshot
    /// shows them: an expandable segment as one segment per run of mapped pages.
    pub fn segments(&self) -> Vec<SegmentView<'_>> {
        let mut out = Vec::new();
        for (&addr, seg) in &self.segments {
            let mut view: Option<SegmentView> = None;
            let mut id = seg.first;
            while id != NONE {
                let b = self.block(id);
                if b.mapped {
                    let v = view.get_or_insert_with(|| SegmentView {
                        addr: b.addr,
                        size: 0,
                        stream: seg.stream,
                        pool: seg.pool,
                        expandable: seg.expandable,
                        blocks: Vec::new(),
                    });
                    v.size += b.size;
                    v.blocks.push(b);
                } else if let Some(v) = view.take() {
                    out.push(v);
                }
                id = b.next;
            }
            out.extend(view);
            debug_assert!(seg.expandable || out.last().is_some_and(|v| v.addr == addr));
        }
        out
    }

    /// The segment holding `addr`, if any.
    pub fn segment_at(&self, addr: u64) -> Option<(u64, &SegmentInfo)> {
        self.segments
            .range(..=addr)
            .next_back()
            .filter(|(&a, s)| addr < a + s.size)
            .map(|(&a, s)| (a, s))
    }

    /// The largest free block, in bytes.
    pub fn largest_free(&self) -> u64 {
        self.free
            .iter()
            .flat_map(|p| p.keys().map(|k| k.1))
            .max()
            .unwrap_or(0)
    }
}
