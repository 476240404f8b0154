//! Per-device reserved memory of one process, its peak, and who held it at the peak.
//! The run's per-device totals (processes sharing a device) use the same bookkeeping,
//! with groups keyed by process too.

use super::block::GroupKey;
use super::Map;
use std::hash::Hash;

/// Device memory one process (or, keyed by process too, a run) holds on one device.
#[derive(Clone, Debug)]
pub struct DeviceUsage<K = GroupKey> {
    pub device: i32,
    /// Bytes held now, all device kinds together.
    pub reserved: u64,
    pub peak_reserved: u64,
    /// Time of the peak (ns since the process's trace start).
    pub peak_t: u64,
    /// Live bytes by allocating group now.
    pub groups: Map<K, GroupBytes>,
    /// The same at the peak: taken lazily, when memory first drops after a new peak.
    pub peak_groups: Map<K, GroupBytes>,
    peak_pending: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupBytes {
    pub bytes: u64,
    pub blocks: u64,
}

impl<K: Copy + Eq + Hash> DeviceUsage<K> {
    pub fn new(device: i32) -> Self {
        DeviceUsage {
            device,
            reserved: 0,
            peak_reserved: 0,
            peak_t: 0,
            groups: Map::default(),
            peak_groups: Map::default(),
            peak_pending: false,
        }
    }

    pub fn add(&mut self, t: u64, key: K, size: u64) {
        // Saturating: a hostile input's blocks of about 2^63 bytes each would overflow.
        self.reserved = self.reserved.saturating_add(size);
        let g = self.groups.entry(key).or_default();
        g.bytes = g.bytes.saturating_add(size);
        g.blocks += 1;
        if self.reserved > self.peak_reserved {
            self.peak_reserved = self.reserved;
            self.peak_t = t;
            self.peak_pending = true;
        }
    }

    pub fn remove(&mut self, key: K, size: u64) {
        self.remove_blocks(
            key,
            GroupBytes {
                bytes: size,
                blocks: 1,
            },
        );
    }

    /// Removes `gone.blocks` blocks of `gone.bytes` in all from group `key`.
    pub fn remove_blocks(&mut self, key: K, gone: GroupBytes) {
        let size = gone.bytes;
        self.settle_peak();
        self.reserved = self.reserved.saturating_sub(size);
        if let Some(g) = self.groups.get_mut(&key) {
            g.bytes = g.bytes.saturating_sub(size);
            g.blocks = g.blocks.saturating_sub(gone.blocks);
            if g.blocks == 0 {
                self.groups.remove(&key);
            }
        }
    }

    /// The peak counts from now on (`torch.cuda.reset_peak_memory_stats` for this
    /// usage): the bytes held now, at time `t`, are the peak so far.
    pub fn restart_peak(&mut self, t: u64) {
        self.peak_reserved = self.reserved;
        self.peak_t = t;
        self.peak_groups = self.groups.clone();
        self.peak_pending = false;
    }

    /// Copies the live groups into the peak groups if the peak is the current state.
    pub fn settle_peak(&mut self) {
        if self.peak_pending {
            self.peak_groups = self.groups.clone();
            self.peak_pending = false;
        }
    }
}
