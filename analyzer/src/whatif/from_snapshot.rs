//! A PyTorch snapshot as replay input: each device's trace entries as requests, and the
//! state at the trace's start rebuilt by undoing the trace, newest entry first, on the
//! snapshot's final segments.

use super::input::{Event, History, PrivateSegment, Span};
use crate::allocator::settings::Settings;
use crate::allocator::sizes::{pool_of_segment, round_size, should_split};
use crate::allocator::{StartBlock, StartSegment};
use crate::snapshot::{Action, BlockState, DeviceSnapshot, Snapshot, TraceEntry};
use std::collections::BTreeMap;

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
                blocks: s
                    .blocks
                    .iter()
                    .filter(|b| b.state != BlockState::Inactive)
                    .map(|b| StartBlock {
                        addr: b.address,
                        size: b.size,
                        requested: b.requested_size.unwrap_or(b.size),
                        pending_free: b.state == BlockState::ActivePendingFree,
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
    h.start = rebuild_start(&h, &end)?;
    h.end = Some(end);
    Ok(h)
}

/// A block live at some point of the backward walk; `size` unknown for blocks allocated
/// before the trace and freed in it (the trace names their requested size only), which
/// are live until event `freed_at`.
struct Live {
    size: Option<u64>,
    requested: u64,
    pending_free: bool,
    freed_at: usize,
}

/// The segments and live blocks when the trace starts.
fn rebuild_start(h: &History, end: &[StartSegment]) -> Result<Vec<StartSegment>, String> {
    let mut segs: BTreeMap<u64, (u64, u64)> = end
        .iter()
        .filter(|s| !s.expandable)
        .map(|s| (s.addr, (s.size, s.stream)))
        .collect();
    // Bytes mapped into expandable segments, walking back.
    let mut mapped: i128 = end
        .iter()
        .filter(|s| s.expandable)
        .map(|s| i128::from(s.size))
        .sum();
    let mut live: BTreeMap<u64, Live> = end
        .iter()
        .flat_map(|s| s.blocks.iter())
        .map(|b| {
            let l = Live {
                size: Some(b.size),
                requested: b.requested,
                pending_free: b.pending_free,
                freed_at: usize::MAX,
            };
            (b.addr, l)
        })
        .collect();
    let bad = |i: usize, what: &str| {
        Err(format!(
            "trace entry {}: {what}: the trace does not agree with the final segments",
            h.source_index[i]
        ))
    };
    for (i, ev) in h.events.iter().enumerate().rev() {
        match *ev {
            Event::SegmentAlloc(Span { addr, .. }) => {
                if segs.remove(&addr).is_none() {
                    return bad(
                        i,
                        &format!("segment_alloc {addr:#x} of a segment not there later"),
                    );
                }
            }
            Event::SegmentFree(Span { addr, size, stream }) => {
                segs.insert(addr, (size, stream));
            }
            Event::SegmentMap(s) => mapped -= i128::from(s.size),
            Event::SegmentUnmap(s) => mapped += i128::from(s.size),
            Event::Alloc { addr, .. } => {
                if live.remove(&addr).is_none() {
                    return bad(
                        i,
                        &format!(
                            "alloc {addr:#x} of a block neither live at the end nor freed later"
                        ),
                    );
                }
            }
            Event::FreeCompleted { addr, size } => {
                let requested = size;
                live.insert(
                    addr,
                    Live {
                        size: None,
                        requested,
                        pending_free: true,
                        freed_at: i,
                    },
                );
            }
            Event::FreeRequested { addr, .. } => match live.get_mut(&addr) {
                Some(l) => l.pending_free = false,
                None => {
                    return bad(
                        i,
                        &format!("free_requested {addr:#x} of a block not live after it"),
                    )
                }
            },
            Event::Oom { .. } => {}
        }
    }
    if mapped != 0 {
        // A reservation's start and extent are in no snapshot: only the pages mapped in it.
        return Err(format!(
            "the trace starts with {mapped} bytes mapped in expandable segments, whose reserved address space the snapshot does not show: record the history from before the first segment_map to replay it"
        ));
    }
    let mut start: Vec<StartSegment> = segs
        .iter()
        .map(|(&addr, &(size, stream))| StartSegment {
            addr,
            size,
            stream,
            blocks: Vec::new(),
            expandable: false,
        })
        .collect();
    let settings = &h.settings;
    let first_alloc = first_allocs(h);
    for (&addr, l) in &live {
        let i = start.partition_point(|s| s.addr <= addr);
        let seg = match i.checked_sub(1).map(|i| &mut start[i]) {
            Some(s) if addr < s.addr + s.size => s,
            _ => {
                return Err(format!(
                    "block {addr:#x}, live when the trace starts, lies in no segment"
                ))
            }
        };
        let end = live
            .range(addr + 1..)
            .next()
            .map(|(&a, _)| a)
            .filter(|&a| a < seg.addr + seg.size)
            .unwrap_or(seg.addr + seg.size);
        // A block the trace allocates while this one is live begins past its end.
        let next = match l.size {
            Some(_) => end,
            None => first_alloc
                .range(addr + 1..end)
                .find(|&(_, &at)| at < l.freed_at)
                .map_or(end, |(&a, _)| a),
        };
        let gap = next - addr;
        let size = match l.size {
            Some(s) => s,
            None => {
                let rounded = round_size(l.requested, settings);
                if rounded > gap {
                    return Err(format!(
                        "block {addr:#x} ({} bytes requested), live when the trace starts, overlaps the next block",
                        l.requested
                    ));
                }
                // Split as the allocator would have, had the space up to the next block
                // live beside it been one free block when it was allocated: where that
                // space leaves no remainder the allocator splits off, the block is all of
                // it (no free block that small can lie after it in that pool).
                if should_split(pool_of_segment(seg.size), gap, rounded, settings) {
                    rounded
                } else {
                    gap
                }
            }
        };
        seg.blocks.push(StartBlock {
            addr,
            size,
            requested: l.requested,
            pending_free: l.pending_free,
        });
    }
    Ok(start)
}

/// The event index of the first `alloc` at each address.
fn first_allocs(h: &History) -> BTreeMap<u64, usize> {
    let mut first = BTreeMap::new();
    for (i, ev) in h.events.iter().enumerate() {
        if let Event::Alloc { addr, .. } = *ev {
            first.entry(addr).or_insert(i);
        }
    }
    first
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
