//! What a replay reads: one device's allocator requests in order, the recorded segment
//! events between them, and the state at the start. Any source (a PyTorch snapshot, a
//! trace) is turned into this.

pub use crate::allocator::Span;
use crate::allocator::{Settings, StartSegment};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The program asks for `size` bytes; `addr`: where the recorded run placed it (the
    /// block's name for the frees that follow).
    Alloc {
        size: u64,
        stream: u64,
        addr: u64,
    },
    /// The program frees the block it got at `addr` (`size`: the bytes it had asked
    /// for); the block is reused once `FreeCompleted`.
    FreeRequested {
        addr: u64,
        size: u64,
    },
    FreeCompleted {
        addr: u64,
        size: u64,
    },
    /// Recorded driver calls: checked against the replay under the recorded settings.
    SegmentAlloc(Span),
    SegmentFree(Span),
    /// Pages mapped into, or unmapped from, an expandable segment.
    SegmentMap(Span),
    SegmentUnmap(Span),
    /// A request for `size` bytes that failed in the recorded run; `device_free`: what
    /// the driver then reported free.
    Oom {
        size: u64,
        device_free: Option<u64>,
        stream: u64,
    },
}

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

impl Event {
    /// A driver call the recording shows, not a request.
    pub fn is_segment_event(&self) -> bool {
        matches!(
            self,
            Event::SegmentAlloc(_)
                | Event::SegmentFree(_)
                | Event::SegmentMap(_)
                | Event::SegmentUnmap(_)
        )
    }
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
