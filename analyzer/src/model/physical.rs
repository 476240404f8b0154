//! Virtual-memory physical handles: memory taken by `cuMemCreate` is held until the
//! handle is released AND its last mapping is unmapped, in either order.

use super::block::Block;
use super::Map;
use std::collections::BTreeMap;

struct Handle {
    block: Block,
    released: bool,
    mappings: u32,
}

#[derive(Default)]
pub struct PhysicalTracker {
    handles: Map<u64, Handle>,
    /// Mapped ranges by start address: (size, handle).
    mappings: BTreeMap<u64, (u64, u64)>,
}

impl PhysicalTracker {
    /// A new handle; `block.addr` is the handle value. Returns the block of a live
    /// handle with the same value, to stop counting: the driver gives a value out again
    /// only once the old handle is gone, so its release or last unmap was not seen.
    pub fn create(&mut self, block: Block) -> Option<Block> {
        let old = self.handles.insert(
            block.addr,
            Handle {
                block,
                released: false,
                mappings: 0,
            },
        )?;
        // The old handle's mappings must not count against the new one.
        let handle = block.addr;
        self.mappings.retain(|_, (_, h)| *h != handle);
        Some(old.block)
    }

    /// Returns the block to stop counting if this was the last reference.
    pub fn release(&mut self, handle: u64) -> Option<Block> {
        let h = self.handles.get_mut(&handle)?;
        h.released = true;
        if h.mappings == 0 {
            return self.handles.remove(&handle).map(|h| h.block);
        }
        None
    }

    pub fn map(&mut self, addr: u64, size: u64, handle: u64) {
        if let Some(h) = self.handles.get_mut(&handle) {
            h.mappings += 1;
            self.mappings.insert(addr, (size, handle));
        }
    }

    /// Unmaps every mapping that starts inside `[addr, addr + size)`; returns the blocks
    /// whose memory is now given back.
    pub fn unmap(&mut self, addr: u64, size: u64) -> Vec<Block> {
        let end = addr.saturating_add(size.max(1));
        let starts: Vec<u64> = self.mappings.range(addr..end).map(|(&a, _)| a).collect();
        let mut freed = Vec::new();
        for start in starts {
            let Some((_, handle)) = self.mappings.remove(&start) else {
                continue;
            };
            if let Some(h) = self.handles.get_mut(&handle) {
                h.mappings = h.mappings.saturating_sub(1);
                if h.mappings == 0 && h.released {
                    if let Some(h) = self.handles.remove(&handle) {
                        freed.push(h.block);
                    }
                }
            }
        }
        freed
    }

    /// Mapped ranges of `dev`'s handles, in address order: (address, size).
    pub fn mapped(&self, dev: i32) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.mappings
            .iter()
            .filter(move |(_, (_, h))| self.handles.get(h).is_some_and(|h| h.block.dev == dev))
            .map(|(&a, &(s, _))| (a, s))
    }

    /// Handles still holding memory.
    pub fn live(&self) -> impl Iterator<Item = &Block> {
        self.handles.values().map(|h| &h.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_schema::{Api, Kind, Location};

    fn handle(value: u64, size: u64) -> Block {
        Block {
            addr: value,
            size,
            api: Api::CuMemCreate,
            dev: 0,
            t: 0,
            tid: 0,
            stack: 0,
            kind: Kind::Physical,
            loc: Location::Device,
            category: None,
        }
    }

    #[test]
    fn a_handle_value_given_out_again_returns_the_old_block_and_its_mappings() {
        let mut p = PhysicalTracker::default();
        assert_eq!(p.create(handle(7, 2 << 20)), None);
        p.map(0x1000_0000, 2 << 20, 7);
        let old = p
            .create(handle(7, 4 << 20))
            .expect("the old handle comes back");
        assert_eq!(old.size, 2 << 20);
        assert_eq!(p.mapped(0).count(), 0, "the old mapping is gone");
        assert_eq!(p.live().map(|b| b.size).sum::<u64>(), 4 << 20);
        // The new handle is held by its own release, not the old mapping's unmap.
        assert!(p.unmap(0x1000_0000, 2 << 20).is_empty());
        assert_eq!(p.release(7).map(|b| b.size), Some(4 << 20));
    }
}
