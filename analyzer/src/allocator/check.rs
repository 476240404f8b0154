//! Checks of a replay against the recording: the final segments block by block, and why a
//! request landed elsewhere than recorded.

use super::state::{Allocator, StartSegment};

/// The first difference between the replay's segments and the recorded final ones.
pub fn end_state(a: &Allocator, recorded: &[StartSegment]) -> Option<String> {
    let replayed = a.segments();
    let mut rec: Vec<&StartSegment> = recorded.iter().collect();
    rec.sort_by_key(|s| s.addr);
    for (i, r) in rec.iter().enumerate() {
        let Some(seg) = replayed.get(i) else {
            return Some(format!(
                "at the end the recording has segment {:#x} ({} bytes), which the replay does not",
                r.addr, r.size
            ));
        };
        let addr = seg.addr;
        if addr != r.addr || seg.size != r.size {
            return Some(format!(
                "at the end the recording has segment {:#x} ({} bytes) where the replay has {addr:#x} ({} bytes)",
                r.addr, r.size, seg.size
            ));
        }
        let live: Vec<_> = seg.blocks.iter().filter(|b| b.busy()).collect();
        for (j, rb) in r.blocks.iter().enumerate() {
            match live.get(j) {
                Some(b) if b.addr == rb.addr && b.size == rb.size && b.pending_free == rb.pending_free => {}
                Some(b) => {
                    return Some(format!(
                        "at the end segment {addr:#x} has block {:#x} of {} bytes{} recorded, {:#x} of {} bytes{} replayed",
                        rb.addr,
                        rb.size,
                        pending(rb.pending_free),
                        b.addr,
                        b.size,
                        pending(b.pending_free)
                    ))
                }
                None => {
                    return Some(format!(
                        "at the end segment {addr:#x} has block {:#x} of {} bytes recorded, free in the replay",
                        rb.addr, rb.size
                    ))
                }
            }
        }
        if let Some(b) = live.get(r.blocks.len()) {
            return Some(format!(
                "at the end segment {addr:#x} has block {:#x} of {} bytes replayed, free in the recording",
                b.addr, b.size
            ));
        }
    }
    replayed.get(rec.len()).map(|seg| {
        format!(
            "at the end the replay has segment {:#x} ({} bytes), which the recording does not",
            seg.addr, seg.size
        )
    })
}

fn pending(p: bool) -> &'static str {
    if p {
        " (pending free)"
    } else {
        ""
    }
}

/// What the recorded address is in the replay: why best fit did not pick it.
pub fn explain_address(a: &Allocator, addr: u64, stream: u64) -> String {
    let Some((seg_addr, seg)) = a.segment_at(addr) else {
        return format!("in the replay no segment holds {addr:#x}");
    };
    let mut id = seg.first;
    while id != super::blocks::NONE {
        let b = a.block(id);
        if addr >= b.addr && addr < b.addr + b.size {
            let state = if b.busy() { "allocated" } else { "free" };
            let other = if b.stream != stream {
                format!(" of stream {:#x}", b.stream)
            } else {
                String::new()
            };
            return format!(
                "in the replay {addr:#x} lies in the {state} block {:#x} of {} bytes{other} in the {} segment {seg_addr:#x}",
                b.addr,
                b.size,
                seg.pool.name()
            );
        }
        id = b.next;
    }
    format!("in the replay {addr:#x} lies in segment {seg_addr:#x} but in none of its blocks")
}
