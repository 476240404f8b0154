//! A PyTorch snapshot as replay input: each device's trace entries as requests, and the
//! state at the trace's start rebuilt by undoing the trace, newest entry first, on the
//! snapshot's final segments (`allocator::start`).

use super::input::{Event, History, PrivateSegment, Span};
use crate::allocator::settings::Settings;
use crate::allocator::sizes::{pool_of_segment, Pool};
use crate::allocator::start::{self, Fit};
use crate::allocator::{StartBlock, StartSegment};
use crate::snapshot::{Action, BlockState, DeviceSnapshot, Snapshot, TraceEntry};

/// One history per device whose trace has allocator entries.
pub fn histories(snap: &Snapshot, settings: &Settings) -> Result<Vec<History>, String> {
    let mut out = Vec::new();
    for d in snap.devices.iter().filter(|d| !d.trace.is_empty()) {
        let h = history(d, settings).map_err(|e| format!("device {}: {e}", d.device))?;
        if !h.events.is_empty() {
            out.push(h);
        }
    }
    Ok(out)
}

/// Larger than any device: a corrupt entry, refused before it can overflow a sum.
const MAX_SIZE: u64 = 1 << 50;

/// A segment's pool: as the snapshot names it, else by its size.
pub fn pool_of(s: &crate::snapshot::Segment) -> Pool {
    match s.segment_type.as_str() {
        "small" => Pool::Small,
        "large" => Pool::Large,
        _ => pool_of_segment(s.total_size),
    }
}

/// The segments of a snapshot, with their allocated and pending-free blocks.
fn end_state(d: &DeviceSnapshot) -> Result<Vec<StartSegment>, String> {
    d.segments
        .iter()
        .map(|s| {
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
        })
        .collect()
}

fn history(d: &DeviceSnapshot, settings: &Settings) -> Result<History, String> {
    let mut h = History {
        device: d.device,
        settings: settings.clone(),
        ..Default::default()
    };
    // Only the final segments name their pool: a private pool's segment freed inside the
    // history is not known as one.
    h.private = d
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
    h.private.sort_by_key(|s| s.addr);
    for (i, e) in d.trace.iter().enumerate() {
        if e.size > MAX_SIZE || e.addr > u64::MAX - MAX_SIZE {
            return Err(format!(
                "trace entry {i}: {} of {} bytes at {:#x}: not a plausible size or address",
                e.action.name(),
                e.size,
                e.addr
            ));
        }
        let ev = match &e.action {
            Action::Alloc => Event::Alloc {
                size: e.size,
                stream: e.stream,
                addr: e.addr,
            },
            Action::FreeRequested => Event::FreeRequested {
                addr: e.addr,
                size: e.size,
            },
            Action::FreeCompleted => Event::FreeCompleted {
                addr: e.addr,
                size: e.size,
            },
            Action::SegmentAlloc => Event::SegmentAlloc(span(e)),
            Action::SegmentFree => Event::SegmentFree(span(e)),
            Action::Oom => Event::Oom {
                size: e.size,
                device_free: e.device_free,
                stream: e.stream,
            },
            // A memory_snapshot() call: no change to the allocator.
            Action::Snapshot => continue,
            Action::SegmentMap => Event::SegmentMap(span(e)),
            Action::SegmentUnmap => Event::SegmentUnmap(span(e)),
            Action::Other(name) => {
                return Err(format!("trace entry {i}: unknown action {name:?}"));
            }
        };
        h.push(ev, i);
    }
    let end = end_state(d)?;
    let newest_first = h
        .events
        .iter()
        .zip(&h.source_index)
        .rev()
        .map(|(e, &src)| Ok((src, e.clone())));
    h.start = start::rebuild(&end, settings, newest_first, Fit::Strict)?.segments;
    h.end = Some(end);
    Ok(h)
}

/// Expandable segments in use where the settings do not say so (snapshots before 2.4
/// record none): a `segment_map` or an expandable segment shows it.
pub fn infer_expandable(snap: &Snapshot, settings: &mut Settings) {
    let shown = snap.devices.iter().any(|d| {
        d.segments.iter().any(|s| s.is_expandable)
            || d.trace.iter().any(|e| e.action == Action::SegmentMap)
    });
    settings.expandable_segments |= shown;
}

fn span(e: &TraceEntry) -> Span {
    Span {
        addr: e.addr,
        size: e.size,
        stream: e.stream,
    }
}
