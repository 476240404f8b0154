//! The layers around "reserved", per device: allocated (blocks, or tensors, an allocator
//! says it handed out inside reserved memory, each with the stack that asked for it) and
//! device (what NVML says this process uses).

use super::block::GroupKey;
use super::device::DeviceUsage;
use super::Map;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub struct Layers {
    pub devices: BTreeMap<i32, DeviceLayers>,
    /// Live tensors per device by who asked for them, counted in requested bytes (as
    /// memory_viz's Active Memory Timeline counts): their peak and the groups at it.
    pub tensors: BTreeMap<i32, DeviceUsage>,
    /// Live blocks by address.
    blocks: Map<u64, LiveBlock>,
    /// What the last block event did to the tensors, for the run's per-GPU sums.
    changes: Vec<Change>,
}

#[derive(Clone, Copy, Debug)]
pub struct LiveBlock {
    pub dev: i32,
    /// The block's size; where the source does not know it, the requested bytes (the
    /// least it takes).
    pub size: u64,
    pub requested: u64,
    pub key: GroupKey,
    /// When it was handed out (ns since the trace start).
    pub t: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceLayers {
    /// Summed `size` of live blocks, as `torch.cuda.memory_allocated()` counts.
    pub allocated: u64,
    pub peak_allocated: u64,
    /// Summed requested bytes of live blocks.
    pub requested: u64,
    /// This process's used memory by NVML's last sample, and the most it showed.
    pub device: Option<u64>,
    pub peak_device: Option<u64>,
    /// Block annotations were seen on this device.
    pub annotated: bool,
    /// A block of unknown size was live at some moment (a snapshot's history gives only
    /// requested sizes): it counts as its requested bytes, and `allocated` and
    /// `peak_allocated` are lower bounds.
    pub sizes_unknown: bool,
}

impl Layers {
    /// The peaks count from time `t` (ns since the trace start): what is held now is the
    /// peak so far. The device layer is sampled: its last sample may be from before memory
    /// was freed, so its peak is the first sample's from here on (none until one is taken).
    pub fn restart_peaks(&mut self, t: u64) {
        for d in self.devices.values_mut() {
            d.peak_allocated = d.allocated;
            d.peak_device = None;
        }
        for u in self.tensors.values_mut() {
            u.restart_peak(t);
        }
    }

    fn device(&mut self, dev: i32) -> &mut DeviceLayers {
        self.devices.entry(dev).or_default()
    }

    /// A block handed out at time `t` (ns since the trace start); `size` 0: not known, and
    /// counted as its requested bytes (`sizes_unknown` then says `allocated` is a lower
    /// bound).
    pub fn block_alloc(
        &mut self,
        t: u64,
        dev: i32,
        addr: u64,
        size: u64,
        requested: u64,
        key: GroupKey,
    ) {
        self.changes.clear();
        let unknown = size == 0 && requested > 0;
        let size = if unknown { requested } else { size };
        let block = LiveBlock {
            dev,
            size,
            requested,
            key,
            t,
        };
        if let Some(old) = self.blocks.insert(addr, block) {
            // A block handed out again without its return: the older one is gone.
            self.uncount(old);
        }
        let d = self.device(dev);
        d.annotated = true;
        d.sizes_unknown |= unknown;
        // Saturating: a hostile input's blocks of about 2^63 bytes each would overflow.
        d.allocated = d.allocated.saturating_add(size);
        d.requested = d.requested.saturating_add(requested);
        d.peak_allocated = d.peak_allocated.max(d.allocated);
        self.tensors
            .entry(dev)
            .or_insert_with(|| DeviceUsage::new(dev))
            .add(t, key, requested);
        self.changes.push(Change {
            dev,
            key,
            bytes: requested,
            added: true,
        });
    }

    pub fn block_free(&mut self, addr: u64) {
        self.changes.clear();
        if let Some(old) = self.blocks.remove(&addr) {
            self.uncount(old);
        }
    }

    fn uncount(&mut self, b: LiveBlock) {
        let d = self.device(b.dev);
        d.allocated = d.allocated.saturating_sub(b.size);
        d.requested = d.requested.saturating_sub(b.requested);
        if let Some(t) = self.tensors.get_mut(&b.dev) {
            t.remove(b.key, b.requested);
        }
        self.changes.push(Change {
            dev: b.dev,
            key: b.key,
            bytes: b.requested,
            added: false,
        });
    }

    /// What the last block event did to the live tensors (requested bytes).
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Clears [`Layers::changes`] for an event that is not a block event.
    pub fn clear_changes(&mut self) {
        self.changes.clear();
    }

    /// Settles the tensors' peak groups; call once after the last event.
    pub fn finish(&mut self) {
        for t in self.tensors.values_mut() {
            t.settle_peak();
        }
    }

    pub fn device_sample(&mut self, dev: i32, used: u64) {
        let d = self.device(dev);
        d.device = Some(used);
        d.peak_device = Some(d.peak_device.unwrap_or(0).max(used));
    }

    /// Every live tensor: (device, requested bytes, who asked, when).
    pub fn live_tensors(&self) -> impl Iterator<Item = (i32, u64, GroupKey, u64)> + '_ {
        self.blocks
            .values()
            .map(|b| (b.dev, b.requested, b.key, b.t))
    }

    /// Live blocks on every device.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Every live block, by address.
    pub fn blocks(&self) -> impl Iterator<Item = (u64, &LiveBlock)> {
        self.blocks.iter().map(|(&a, b)| (a, b))
    }

    /// Live blocks on `dev`, sorted by address: (address, size).
    pub fn live_blocks(&self, dev: i32) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.dev == dev)
            .map(|(&a, b)| (a, b.size))
            .collect();
        v.sort_unstable();
        v
    }
}

/// One change to the device memory a process holds, made by the last applied event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub dev: i32,
    pub key: GroupKey,
    /// Bytes taken (`added`) or given back.
    pub bytes: u64,
    pub added: bool,
}

/// Free space of reserved `segments` (address, size) not covered by `blocks` (sorted by
/// address): the largest free block, the number of free blocks, and their total.
pub fn free_space(segments: &[(u64, u64)], blocks: &[(u64, u64)]) -> (u64, u64, u64) {
    let (mut largest, mut count, mut total) = (0, 0, 0);
    // Saturating: a crafted snapshot's block or segment may reach past 2^64.
    for &(start, size) in segments {
        let end = start.saturating_add(size);
        let mut at = start;
        let first = blocks.partition_point(|b| b.0 < start);
        for &(b, len) in blocks[first..].iter().take_while(|b| b.0 < end) {
            if b > at {
                let gap = b - at;
                largest = largest.max(gap);
                count += 1;
                total += gap;
            }
            at = at.max(b.saturating_add(len));
        }
        if end > at {
            let gap = end - at;
            largest = largest.max(gap);
            count += 1;
            total += gap;
        }
    }
    (largest, count, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_between_and_around_blocks() {
        // One 100-byte segment at 1000 with blocks [1010,1030) and [1050,1060):
        // free 10 + 20 + 40 = 70 in 3 pieces, the largest 40.
        let segments = [(1000, 100)];
        let blocks = [(1010, 20), (1050, 10)];
        assert_eq!(free_space(&segments, &blocks), (40, 3, 70));
        // A second, untouched segment is one free block of its size.
        assert_eq!(
            free_space(&[(1000, 100), (5000, 64)], &blocks),
            (64, 4, 134)
        );
    }

    #[test]
    fn a_block_or_segment_reaching_past_2_to_the_64_ends_there() {
        // A crafted snapshot's: the sums overflowed (timeline and report aborted).
        let top = u64::MAX - 100;
        assert_eq!(
            free_space(&[(top, 1000)], &[(top + 50, u64::MAX)]),
            (50, 1, 50)
        );
    }

    #[test]
    fn allocated_follows_blocks() {
        let mut l = Layers::default();
        let key = GroupKey {
            api: vramtrace_schema::Api::VramtraceBlockAlloc,
            stack: 0,
            category: None,
        };
        l.block_alloc(1, 0, 10, 512, 500, key);
        l.block_alloc(2, 0, 600, 1024, 1000, key);
        l.block_free(10);
        let d = &l.devices[&0];
        assert_eq!(
            (d.allocated, d.peak_allocated, d.requested),
            (1024, 1536, 1000)
        );
        let t = &l.tensors[&0];
        assert_eq!((t.reserved, t.peak_reserved, t.peak_t), (1000, 1500, 2));
    }
}
