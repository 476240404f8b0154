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
    /// A new handle; `block.addr` is the handle value.
    pub fn create(&mut self, block: Block) {
        self.handles.insert(
            block.addr,
            Handle {
                block,
                released: false,
                mappings: 0,
            },
        );
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
