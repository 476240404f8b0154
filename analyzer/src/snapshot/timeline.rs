//! Reserved and in-use bytes over the trace entries of a snapshot.
//!
//! The trace is a ring buffer (`max_entries`): its start may be lost, so counting forward
//! from zero is wrong for any long run. Its end, though, is the snapshot itself, whose
//! segments and blocks give exact figures. So the timeline is anchored there and walked
//! backwards, undoing each entry. Block entries carry the *requested* size, so the in-use
//! curve is requested bytes (what memory_viz draws as "allocated"); segment entries carry
//! segment sizes, so the reserved curve is exact.

use super::model::{Action, BlockState, DeviceSnapshot, Frame};

/// The state right after one trace entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// Index of the entry in the device's trace.
    pub index: usize,
    pub time_us: Option<i64>,
    /// Sum of live segment sizes.
    pub reserved: u64,
    /// Requested bytes of live blocks (allocated until `free_completed`); `None` when the
    /// snapshot's blocks do not say their requested sizes.
    pub in_use: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// State before the first entry.
    pub start_reserved: u64,
    pub start_in_use: Option<u64>,
    pub points: Vec<Point>,
    /// False when undoing the entries went below zero somewhere: the trace and the
    /// segments disagree (values were clamped at zero).
    pub consistent: bool,
}

/// An `oom` trace entry with the figures just before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Oom {
    pub index: usize,
    pub time_us: Option<i64>,
    /// The request that failed, in bytes.
    pub requested: u64,
    pub stream: u64,
    /// What the driver reported free when it failed.
    pub device_free: Option<u64>,
    pub reserved: u64,
    pub in_use: Option<u64>,
    pub frames: Vec<Frame>,
}

/// (reserved delta, in-use delta) of one entry.
fn delta(action: &Action, size: u64) -> (i128, i128) {
    let s = size as i128;
    match action {
        Action::SegmentAlloc | Action::SegmentMap => (s, 0),
        Action::SegmentFree | Action::SegmentUnmap => (-s, 0),
        Action::Alloc => (0, s),
        Action::FreeCompleted => (0, -s),
        _ => (0, 0),
    }
}

pub fn timeline(d: &DeviceSnapshot) -> Timeline {
    // Summed in i128: a file's sizes may add up past 2^64; the points are capped below.
    let reserved_end: i128 = d.segments.iter().map(|s| s.total_size as i128).sum();
    let in_use_end: Option<i128> = d
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| b.requested_size.map(i128::from))
        .sum();
    let mut consistent = true;
    let mut reserved = reserved_end;
    let mut in_use = in_use_end;
    let capped = |v: i128| u64::try_from(v).unwrap_or(u64::MAX);
    let mut points = vec![
        Point {
            index: 0,
            time_us: None,
            reserved: 0,
            in_use: None
        };
        d.trace.len()
    ];
    for (i, e) in d.trace.iter().enumerate().rev() {
        points[i] = Point {
            index: i,
            time_us: e.time_us,
            reserved: capped(reserved),
            in_use: in_use.map(capped),
        };
        let (dr, du) = delta(&e.action, e.size);
        reserved -= dr;
        if reserved < 0 {
            consistent = false;
            reserved = 0;
        }
        if let Some(u) = &mut in_use {
            *u -= du;
            if *u < 0 {
                consistent = false;
                *u = 0;
            }
        }
    }
    Timeline {
        start_reserved: capped(reserved),
        start_in_use: in_use.map(capped),
        points,
        consistent,
    }
}

/// Every `oom` entry of the device, with reserved and in-use bytes just before it.
pub fn ooms(d: &DeviceSnapshot) -> Vec<Oom> {
    ooms_in(d, &timeline(d))
}

/// [`ooms`], with the device's [`timeline`] already at hand.
pub fn ooms_in(d: &DeviceSnapshot, t: &Timeline) -> Vec<Oom> {
    d.trace
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == Action::Oom)
        .map(|(i, e)| {
            // An oom entry changes nothing: the state after it is the state before it.
            let p = t.points[i];
            Oom {
                index: i,
                time_us: e.time_us,
                requested: e.size,
                stream: e.stream,
                device_free: e.device_free,
                reserved: p.reserved,
                in_use: p.in_use,
                frames: e.frames.clone(),
            }
        })
        .collect()
}
