//! Memory a process holds that is not device memory, by where it lives: pinned host
//! memory (`cuMemHostAlloc`, host and host-NUMA pools, `cuMemCreate` on the host) and
//! managed pools' memory (CUDA 13). Reported apart, each location on its own; never in a
//! device figure.

use std::collections::BTreeMap;
use vramtrace_schema::Location;

#[derive(Clone, Debug, Default)]
pub struct OffDevice {
    now: BTreeMap<Location, u64>,
    peak: BTreeMap<Location, u64>,
}

/// One location's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocationBytes {
    pub location: Location,
    pub peak: u64,
    pub now: u64,
}

impl OffDevice {
    pub fn add(&mut self, location: Location, bytes: u64) {
        let now = self.now.entry(location).or_default();
        *now = now.saturating_add(bytes);
        let peak = self.peak.entry(location).or_default();
        *peak = (*peak).max(*now);
    }

    pub fn remove(&mut self, location: Location, bytes: u64) {
        if let Some(now) = self.now.get_mut(&location) {
            *now = now.saturating_sub(bytes);
        }
    }

    /// The peaks count from now on: what each location holds now is its peak so far.
    pub fn restart_peaks(&mut self) {
        self.peak.clone_from(&self.now);
    }

    /// Every location that held memory, in `Location` order (host first, managed last).
    pub fn locations(&self) -> impl Iterator<Item = LocationBytes> + '_ {
        self.peak.iter().map(|(&location, &peak)| LocationBytes {
            location,
            peak,
            now: self.now.get(&location).copied().unwrap_or(0),
        })
    }
}
