//! A failed allocation and the state around it.

use super::block::GroupKey;
use super::device::GroupBytes;
use super::Map;
use vramtrace_schema::Event;

/// How many events before a failure are kept with it.
pub const RECENT_EVENTS: usize = 16;

/// Failures kept with the state around them, per process; later ones are counted
/// ([`super::Counts::failed_allocations`]). Each takes a copy of the groups live at
/// that moment: a program that catches out-of-memory errors and retries can fail
/// millions of times with thousands of groups live, and copying them all every time
/// grew with the product of the two.
pub const KEPT_FAILURES: usize = 1000;

/// Groups kept with a failure, largest first (the views show 20).
pub const FAILURE_GROUPS: usize = 100;

#[derive(Clone, Debug)]
pub struct Failure {
    pub event: Event,
    /// Bytes the call asked for.
    pub requested: u64,
    /// Device memory this process held on that device when the call failed.
    pub reserved_on_device: u64,
    /// Peak so far on that device.
    pub peak_before: u64,
    /// What this process held on that device, by allocating group: the
    /// [`FAILURE_GROUPS`] largest.
    pub groups: Map<GroupKey, GroupBytes>,
    /// What it held there by the category the program named (every group, in
    /// [`super::Category::ALL`]'s order), where it named categories with ranges.
    pub named: Option<[GroupBytes; 6]>,
    /// Groups and blocks it held there, all of them.
    pub live_groups: u64,
    pub live_blocks: u64,
    /// The last free/total the driver reported to the program before the failure, if any.
    pub last_meminfo: Option<(u64, u64)>,
    /// The events just before it, oldest first.
    pub recent: Vec<Event>,
    /// The allocator's own state at the failure, where it annotated its blocks.
    pub allocator: Option<AllocatorState>,
    /// The live tensors (annotated blocks) on that device by who asked for them, in
    /// requested bytes.
    pub tensors: Map<GroupKey, GroupBytes>,
    /// PyTorch's own figures at the failure: what the driver said was free (a snapshot's
    /// `oom` entry's `device_free`, or the out-of-memory observer's in the hook's
    /// `torch-HOST-PID.json`) and the device's total or the process's limit (the observer's
    /// only).
    pub device_free: Option<u64>,
    pub device_total: Option<u64>,
    /// vramtrace's own `cuMemGetInfo` right after the failure: (free, total).
    pub probe: Option<(u64, u64)>,
    /// The device layer: this process's used memory on that device by NVML's last sample
    /// before the failure (CUDA context included; what nvidia-smi showed).
    pub device_used: Option<u64>,
    /// How many bytes more than it reserved NVML said the process used at that sample:
    /// its CUDA context and the driver's own.
    pub beyond_reserved: Option<u64>,
    /// Successful allocations before it: failures with the same count and request are
    /// the retries of one out-of-memory error (the caching allocator frees its cache and
    /// asks again).
    pub allocations_before: u64,
}

/// The driver's figure at a failure, by one rule for every view: vramtrace's own question
/// right after it; else PyTorch's figure at it (a snapshot's `oom` entry, the hook's
/// observer); else the program's last answer before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverFigure {
    pub free: u64,
    pub total: Option<u64>,
    pub source: DriverSource,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverSource {
    /// vramtrace's `cuMemGetInfo` right after the failure.
    Probe,
    /// PyTorch's figure at the failure.
    Pytorch,
    /// The program's last `cuMemGetInfo` answer before the failure.
    LastAnswer,
}

impl Failure {
    /// See [`DriverFigure`].
    pub fn driver_at_failure(&self) -> Option<DriverFigure> {
        let figure = |(free, total): (u64, Option<u64>), source| DriverFigure {
            free,
            total,
            source,
        };
        self.probe
            .map(|(f, t)| figure((f, Some(t)), DriverSource::Probe))
            .or(self
                .device_free
                .map(|f| figure((f, self.device_total), DriverSource::Pytorch)))
            .or(self
                .last_meminfo
                .map(|(f, t)| figure((f, Some(t)), DriverSource::LastAnswer)))
    }
}

/// What an allocator that annotates its blocks held when a device allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AllocatorState {
    /// Bytes of blocks handed out.
    pub allocated_bytes: u64,
    /// Reserved memory not handed out: the allocator's cache.
    pub cached_free_bytes: u64,
    /// The largest free piece of reserved memory, and how many pieces there are.
    pub largest_free_block_bytes: u64,
    pub free_blocks: u64,
    /// Reserved memory of expandable segments is mapped pages: free blocks lie in them,
    /// and address space reserved but unmapped is no memory at all.
    pub expandable_segments: bool,
    /// That unmapped address space, where the allocator model knows it (a snapshot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmapped_bytes: Option<u64>,
}

impl From<crate::allocator::follow::Shape> for AllocatorState {
    fn from(s: crate::allocator::follow::Shape) -> Self {
        AllocatorState {
            allocated_bytes: s.allocated,
            cached_free_bytes: s.free_bytes,
            largest_free_block_bytes: s.largest_free,
            free_blocks: s.free_blocks,
            expandable_segments: s.expandable,
            unmapped_bytes: s.expandable.then_some(s.unmapped),
        }
    }
}

/// The `n` largest of `groups` (by bytes, then key, so that the choice is the same every
/// time), in time linear in their number.
pub fn largest_groups(groups: &Map<GroupKey, GroupBytes>, n: usize) -> Map<GroupKey, GroupBytes> {
    let mut all: Vec<(&GroupKey, &GroupBytes)> = groups.iter().collect();
    if all.len() > n {
        all.select_nth_unstable_by(n, |a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(b.0)));
        all.truncate(n);
    }
    all.into_iter().map(|(k, g)| (*k, *g)).collect()
}
