//! What a snapshot's history window started with: PyTorch keeps a bounded history (a
//! ring buffer of `max_entries`), so most snapshots' histories begin after their process
//! did, and what was alive before the first entry is rebuilt from the final state.

/// What a device's history started with, rebuilt from its final state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub entries: usize,
    /// Segments (and runs of mapped pages) and tensors alive before the first entry.
    pub segments: usize,
    pub tensors: usize,
    /// Of those tensors, the ones known by their free inside the history only (no stack).
    pub freed_inside: usize,
    /// Bytes then: reserved (mapped, for expandable segments), in blocks handed out, and
    /// requested by the tensors in them.
    pub reserved: u64,
    pub allocated: u64,
    pub requested: u64,
}
