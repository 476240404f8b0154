//! A failed allocation and the state around it.

use super::block::GroupKey;
use super::device::GroupBytes;
use super::Map;
use vramtrace_schema::Event;

/// How many events before a failure are kept with it.
pub const RECENT_EVENTS: usize = 16;

#[derive(Clone, Debug)]
pub struct Failure {
    pub event: Event,
    /// Bytes the call asked for.
    pub requested: u64,
    /// Device memory this process held on that device when the call failed.
    pub reserved_on_device: u64,
    /// Peak so far on that device.
    pub peak_before: u64,
    /// What this process held on that device, by allocating group.
    pub groups: Map<GroupKey, GroupBytes>,
    /// The last free/total the driver reported to the program before the failure, if any.
    pub last_meminfo: Option<(u64, u64)>,
    /// The events just before it, oldest first.
    pub recent: Vec<Event>,
    /// The allocator's own state at the failure, where it annotated its blocks.
    pub allocator: Option<AllocatorState>,
    /// The live tensors (annotated blocks) on that device by who asked for them, in
    /// requested bytes.
    pub tensors: Map<GroupKey, GroupBytes>,
    /// What the driver said was free right at the failure when it gave no total (a
    /// PyTorch snapshot's `oom` entry).
    pub device_free: Option<u64>,
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
}
