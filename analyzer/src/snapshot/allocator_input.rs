//! A snapshot as the allocator model reads it (`crate::allocator`): the final segments
//! with their live blocks, and each history entry as a request or a driver call. Both the
//! views (which follow the history) and `whatif` (which replays it) read a snapshot
//! through these.

use super::model::{Action, BlockState, DeviceSnapshot, Segment};
use crate::allocator::sizes::{pool_of_segment, Pool};
use crate::allocator::start::Misfit;
use crate::allocator::{Event, Span, StartBlock, StartSegment};
use crate::whatif::input::PrivateSegment;

/// Larger than any device: a corrupt entry, refused before it can overflow a sum.
pub const MAX_SIZE: u64 = 1 << 50;

/// A segment's pool: as the snapshot names it, else by its size.
pub fn pool_of(s: &Segment) -> Pool {
    match s.segment_type.as_str() {
        "small" => Pool::Small,
        "large" => Pool::Large,
        _ => pool_of_segment(s.total_size),
    }
}

/// The final segments of private pools (CUDA graphs, `torch.cuda.MemPool`), by address:
/// only the final segments name their pool, so a private pool's segment freed inside the
/// history is not known as one.
pub fn private_segments(d: &DeviceSnapshot) -> Vec<PrivateSegment> {
    let mut private: Vec<PrivateSegment> = d
        .segments
        .iter()
        .filter_map(|s| {
            let pool = s.segment_pool_id.filter(|&id| id != (0, 0))?;
            Some(PrivateSegment {
                addr: s.address,
                size: s.total_size,
                pool,
            })
        })
        .collect();
    private.sort_by_key(|s| s.addr);
    private
}

/// The segments of a snapshot, with their allocated and pending-free blocks.
pub fn end_state(d: &DeviceSnapshot) -> Result<Vec<StartSegment>, String> {
    d.segments.iter().map(start_segment).collect()
}

/// [`end_state`] of the plausible segments only, and the first implausible one, as a
/// misfit of the history's start.
pub fn end_state_tolerant(d: &DeviceSnapshot) -> (Vec<StartSegment>, Option<Misfit>) {
    let mut bad = None;
    let segments = d
        .segments
        .iter()
        .filter_map(|s| match start_segment(s) {
            Ok(s) => Some(s),
            Err(message) => {
                bad.get_or_insert(Misfit { entry: 0, message });
                None
            }
        })
        .collect();
    (segments, bad)
}

/// Segment `s` with its allocated and pending-free blocks.
fn start_segment(s: &Segment) -> Result<StartSegment, String> {
    let mut sizes = std::iter::once(s.total_size).chain(s.blocks.iter().map(|b| b.size));
    if sizes.any(|n| n > MAX_SIZE) || s.address > u64::MAX - MAX_SIZE {
        return Err(format!(
            "segment {:#x}: not a plausible size or address",
            s.address
        ));
    }
    Ok(StartSegment {
        expandable: s.is_expandable,
        addr: s.address,
        size: s.total_size,
        stream: s.stream,
        pool: pool_of(s),
        blocks: s
            .blocks
            .iter()
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| StartBlock {
                addr: b.address,
                size: b.size,
                requested: b.requested_size.unwrap_or(b.size),
                pending_free: b.state == BlockState::ActivePendingFree,
                freed_inside: false,
            })
            .collect(),
    })
}

/// History entry `i` (`action` with its `addr`, `size`, `stream` and `device_free`) as
/// the allocator reads it: `None` for entries that change nothing in it (`snapshot`
/// markers, `annotate` and actions newer than this reader).
pub fn event_of(
    i: usize,
    action: &Action,
    addr: u64,
    size: u64,
    stream: u64,
    device_free: Option<u64>,
) -> Result<Option<Event>, String> {
    if size > MAX_SIZE || addr > u64::MAX - MAX_SIZE {
        return Err(format!(
            "trace entry {i}: {} of {size} bytes at {addr:#x}: not a plausible size or address",
            action.name()
        ));
    }
    let span = Span { addr, size, stream };
    Ok(Some(match action {
        Action::Alloc => Event::Alloc { size, stream, addr },
        Action::FreeRequested => Event::FreeRequested { addr, size },
        Action::FreeCompleted => Event::FreeCompleted { addr, size },
        Action::SegmentAlloc => Event::SegmentAlloc(span),
        Action::SegmentFree => Event::SegmentFree(span),
        Action::SegmentMap => Event::SegmentMap(span),
        Action::SegmentUnmap => Event::SegmentUnmap(span),
        Action::Oom => Event::Oom {
            size,
            device_free,
            stream,
        },
        Action::Snapshot | Action::Other(_) => return Ok(None),
    }))
}
