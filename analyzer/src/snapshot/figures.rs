//! The figures of one device at the moment of the snapshot: the three sums PyTorch reports
//! and the shape of the cache (fragmentation).

use super::model::{BlockState, DeviceSnapshot, Segment};

/// Per-device figures at the snapshot. Every block is in exactly one of three states, and
/// blocks tile their segments, so `reserved = allocated + pending_free + free`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub segments: usize,
    pub blocks: usize,
    /// Sum of segment `total_size` (`torch.cuda.memory_reserved()`).
    pub reserved: u64,
    /// Sum of `size` of `active_allocated` blocks (`torch.cuda.memory_allocated()`).
    pub allocated: u64,
    /// Sum of `requested_size` of `active_allocated` blocks; `None` when a block lacks it.
    pub requested: Option<u64>,
    /// Bytes of `active_pending_free` blocks: freed, waiting for other streams.
    pub pending_free: u64,
    /// Cached free bytes: sum of `inactive` block sizes, the gaps between live blocks that
    /// the allocator holds but nobody uses (external fragmentation, in bytes).
    pub free: u64,
    /// The largest `inactive` block: the largest request the cache can serve without
    /// asking the driver (per pool, a request only uses blocks of its own pool).
    pub largest_free: u64,
    /// Number of `inactive` blocks.
    pub free_blocks: usize,
    /// Largest inactive block in the small and the large pool apart.
    pub largest_free_small: u64,
    pub largest_free_large: u64,
    /// Internal fragmentation: `allocated - requested`, bytes lost to rounding inside
    /// allocated blocks; `None` when `requested` is.
    pub internal: Option<u64>,
    pub expandable_segments: usize,
}

impl Figures {
    /// External fragmentation as a share of the cached free bytes that lie outside the
    /// largest free block: 0 when all free memory is one block, near 1 when it is dust.
    /// `None` when nothing is free.
    pub fn external_ratio(&self) -> Option<f64> {
        (self.free > 0).then(|| 1.0 - self.largest_free as f64 / self.free as f64)
    }
}

pub fn figures(d: &DeviceSnapshot) -> Figures {
    figures_of(&d.segments)
}

/// [`figures`] of some segments.
pub fn figures_of(segments: &[Segment]) -> Figures {
    let mut f = Figures {
        segments: segments.len(),
        requested: Some(0),
        internal: None,
        ..Default::default()
    };
    for s in segments {
        // Sums saturate: a file can claim sizes whose sum passes 2^64 bytes.
        f.reserved = f.reserved.saturating_add(s.total_size);
        f.expandable_segments += s.is_expandable as usize;
        for b in &s.blocks {
            f.blocks += 1;
            match b.state {
                BlockState::ActiveAllocated => {
                    f.allocated = f.allocated.saturating_add(b.size);
                    f.requested = match (f.requested, b.requested_size) {
                        (Some(r), Some(q)) => Some(r.saturating_add(q)),
                        _ => None,
                    };
                }
                BlockState::ActivePendingFree => {
                    f.pending_free = f.pending_free.saturating_add(b.size)
                }
                BlockState::Inactive => {
                    f.free = f.free.saturating_add(b.size);
                    f.free_blocks += 1;
                    f.largest_free = f.largest_free.max(b.size);
                    if s.segment_type == "small" {
                        f.largest_free_small = f.largest_free_small.max(b.size);
                    } else {
                        f.largest_free_large = f.largest_free_large.max(b.size);
                    }
                }
            }
        }
    }
    f.internal = f.requested.map(|r| f.allocated.saturating_sub(r));
    f
}

/// What in a device's snapshot cannot be so: blocks that hold more than their segments,
/// sums past 2^64 bytes, trace times that run backwards. Each a sentence, for a warning;
/// the figures are shown as the file gives them.
pub fn impossible(d: &DeviceSnapshot, f: &Figures) -> Vec<String> {
    let mut out = Vec::new();
    let held = f
        .allocated
        .saturating_add(f.pending_free)
        .saturating_add(f.free);
    if f.allocated > f.reserved {
        out.push(format!(
            "allocated ({} bytes) is above reserved ({} bytes)",
            f.allocated, f.reserved
        ));
    } else if held > f.reserved {
        out.push(format!(
            "the blocks ({held} bytes) hold more than their segments ({} bytes)",
            f.reserved
        ));
    }
    if [f.reserved, f.allocated, f.pending_free, f.free].contains(&u64::MAX) {
        out.push("sizes add up past 2^64 bytes: the sums shown are capped".into());
    }
    let times: Vec<(usize, i64)> = d
        .trace
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e.time_us?)))
        .collect();
    if let Some(w) = times.windows(2).find(|w| w[1].1 < w[0].1) {
        out.push(format!(
            "trace entry {} is {} us earlier than entry {} before it: time runs backwards",
            w[1].0,
            w[0].1.saturating_sub(w[1].1),
            w[0].0
        ));
    }
    if let Some((i, t)) = times.iter().find(|(_, t)| *t < 0) {
        out.push(format!("trace entry {i} has a negative time ({t} us)"));
    }
    out
}
