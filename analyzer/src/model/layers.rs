//! The layers around "reserved", per device: allocated (blocks an allocator says it handed
//! out inside reserved memory) and device (what NVML says this process uses).

use super::Map;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub struct Layers {
    pub devices: BTreeMap<i32, DeviceLayers>,
    /// Live blocks by address: (device, size, requested).
    blocks: Map<u64, (i32, u64, u64)>,
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
}

impl Layers {
    fn device(&mut self, dev: i32) -> &mut DeviceLayers {
        self.devices.entry(dev).or_default()
    }

    pub fn block_alloc(&mut self, dev: i32, addr: u64, size: u64, requested: u64) {
        if let Some((old_dev, old_size, old_req)) = self.blocks.insert(addr, (dev, size, requested))
        {
            // A block handed out again without its return: the older one is gone.
            let d = self.device(old_dev);
            d.allocated = d.allocated.saturating_sub(old_size);
            d.requested = d.requested.saturating_sub(old_req);
        }
        let d = self.device(dev);
        d.annotated = true;
        d.allocated += size;
        d.requested += requested;
        d.peak_allocated = d.peak_allocated.max(d.allocated);
    }

    pub fn block_free(&mut self, addr: u64) {
        if let Some((dev, size, requested)) = self.blocks.remove(&addr) {
            let d = self.device(dev);
            d.allocated = d.allocated.saturating_sub(size);
            d.requested = d.requested.saturating_sub(requested);
        }
    }

    pub fn device_sample(&mut self, dev: i32, used: u64) {
        let d = self.device(dev);
        d.device = Some(used);
        d.peak_device = Some(d.peak_device.unwrap_or(0).max(used));
    }

    /// Live blocks on every device.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Live blocks on `dev`, sorted by address: (address, size).
    pub fn live_blocks(&self, dev: i32) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.0 == dev)
            .map(|(&a, b)| (a, b.1))
            .collect();
        v.sort_unstable();
        v
    }
}

/// Free space of reserved `segments` (address, size) not covered by `blocks` (sorted by
/// address): the largest free block, the number of free blocks, and their total.
pub fn free_space(segments: &[(u64, u64)], blocks: &[(u64, u64)]) -> (u64, u64, u64) {
    let (mut largest, mut count, mut total) = (0, 0, 0);
    for &(start, size) in segments {
        let end = start + size;
        let mut at = start;
        let first = blocks.partition_point(|b| b.0 < start);
        for &(b, len) in blocks[first..].iter().take_while(|b| b.0 < end) {
            if b > at {
                let gap = b - at;
                largest = largest.max(gap);
                count += 1;
                total += gap;
            }
            at = at.max(b + len);
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
    fn allocated_follows_blocks() {
        let mut l = Layers::default();
        l.block_alloc(0, 10, 512, 500);
        l.block_alloc(0, 600, 1024, 1000);
        l.block_free(10);
        let d = &l.devices[&0];
        assert_eq!(
            (d.allocated, d.peak_allocated, d.requested),
            (1024, 1536, 1000)
        );
    }
}
