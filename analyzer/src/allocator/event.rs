//! What the allocator model is fed: the program's requests in order and the driver calls
//! a recording shows between them, as a snapshot's history or an annotated trace gives
//! them.

use super::state::Span;

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
