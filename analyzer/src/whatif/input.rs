//! What a replay reads: one device's allocator requests in order, the recorded segment
//! events between them, and the state at the start. Any source (a PyTorch snapshot, a
//! trace) is turned into this.

pub use crate::allocator::{Event, Span};
use crate::allocator::{Settings, StartSegment};

/// A segment of a private pool (CUDA graphs, `torch.cuda.MemPool`): the snapshot's
/// `segment_pool_id` other than `(0, 0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateSegment {
    pub addr: u64,
    pub size: u64,
    pub pool: (i64, i64),
}

/// One device's history.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub device: i64,
    /// The allocator's segments when the history starts.
    pub start: Vec<StartSegment>,
    pub events: Vec<Event>,
    /// For each event, its index among the source's entries (for messages and output).
    pub source_index: Vec<usize>,
    /// The segments at the end, as recorded, to check a replay against.
    pub end: Option<Vec<StartSegment>>,
    /// The settings of the recorded run.
    pub settings: Settings,
    /// Segments the snapshot shows in private pools, by address.
    pub private: Vec<PrivateSegment>,
}

impl History {
    /// The private-pool segment holding `addr`, if the snapshot shows one.
    pub fn private_at(&self, addr: u64) -> Option<&PrivateSegment> {
        let i = self.private.partition_point(|s| s.addr <= addr);
        i.checked_sub(1)
            .map(|i| &self.private[i])
            .filter(|s| addr < s.addr + s.size)
    }

    pub fn push(&mut self, event: Event, source: usize) {
        self.events.push(event);
        self.source_index.push(source);
    }
}
