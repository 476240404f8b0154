//! A device's final state rewound through its history, last entry first: what was alive
//! before the first entry (a ring buffer that wrapped, recording turned on late), the block
//! sizes of the allocations still alive at the end, and the entries the final state
//! contradicts.
//!
//! Every entry is read here, and nothing else of the snapshot runs meanwhile (its events
//! wait for what was alive before): a long history is rewound in two halves at once. The later half is
//! rewound from the final state as usual. The earlier one is rewound from an unknown
//! state: an address is looked up in the later half's result only where the earlier half
//! allocates it before anything of its own set it (in rewind order), and whatever it set
//! last wins, as it would have in one pass. Both give the same figures.

use super::history::{self, HistoryEntry};
use super::model::{Action, BlockState, Frame, Segment};
use super::pickle::{Pickle, Value};
use crate::model::Map;

/// Below this many entries the history is rewound in one pass.
const SPLIT_ENTRIES: usize = 1 << 16;

/// A tensor alive before the window: its sizes and allocation stack.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alive {
    pub size: u64,
    pub requested: u64,
    pub stack: u64,
    /// Known from its `free_completed` only: allocated before the history.
    pub freed_inside: bool,
}

/// A device's final state rewound through its history.
#[derive(Clone, Default, Debug, PartialEq)]
pub struct Rewound {
    /// Segments and tensors alive before the first entry, by address.
    pub segments: Map<u64, u64>,
    pub alive: Map<u64, Alive>,
    /// Block sizes of the allocations still alive at the end, by entry index (last first).
    pub sizes: Vec<(usize, u64)>,
    /// Entries the final state contradicts.
    pub disagree: u64,
    /// `time_us` of the first entry that has one, and the earliest and latest of all.
    pub first_us: Option<i64>,
    pub earliest_us: Option<i64>,
    pub latest_us: Option<i64>,
    pub entries: usize,
}

impl Rewound {
    /// The final state, to rewind from: `segments` and their blocks in use, each with
    /// the stack `stack` gives its frames.
    pub fn from_final(segments: &[Segment], mut stack: impl FnMut(&[Frame]) -> u64) -> Rewound {
        let mut r = Rewound::default();
        for s in segments {
            r.segments.insert(s.address, s.total_size);
            for b in s.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                let a = Alive {
                    size: b.size,
                    requested: b.requested_size.unwrap_or(b.size),
                    stack: stack(&b.frames),
                    freed_inside: false,
                };
                r.alive.insert(b.address, a);
            }
        }
        r
    }
}

/// `r` (the final state: its segments and live tensors) rewound through `trace`, the
/// history of `device`; in two halves at once where it is long and a thread starts.
pub fn rewind(p: &Pickle, device: i64, trace: &[Value], r: Rewound) -> Result<Rewound, String> {
    let split = trace.len() >= SPLIT_ENTRIES
        && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    if split {
        rewind_split(p, device, trace, r, trace.len() / 2)
    } else {
        rewind_serial(p, device, trace, r)
    }
}

/// Entry `i` of `device`'s history.
fn read(p: &Pickle, device: i64, i: usize, v: Value) -> Result<HistoryEntry, String> {
    history::entry(p, v).map_err(|msg| {
        format!("not a PyTorch memory snapshot: device_traces[{device}][{i}]: {msg}")
    })
}

impl Rewound {
    fn time(&mut self, us: Option<i64>) {
        if let Some(us) = us {
            self.first_us = Some(us);
            self.earliest_us = Some(self.earliest_us.map_or(us, |m| m.min(us)));
            self.latest_us = Some(self.latest_us.map_or(us, |m| m.max(us)));
        }
    }
}

/// The history rewound in one pass.
pub fn rewind_serial(
    p: &Pickle,
    device: i64,
    trace: &[Value],
    r: Rewound,
) -> Result<Rewound, String> {
    let mut r = rewind_from(p, device, trace, 0, r)?;
    r.entries = trace.len();
    Ok(r)
}

/// `trace`, entries `base..` of the history, rewound from `r`.
fn rewind_from(
    p: &Pickle,
    device: i64,
    trace: &[Value],
    base: usize,
    mut r: Rewound,
) -> Result<Rewound, String> {
    for (k, &v) in trace.iter().enumerate().rev() {
        let i = base + k;
        let e = read(p, device, i, v)?;
        r.time(e.time_us);
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                r.disagree += r.segments.remove(&e.addr).is_none() as u64;
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                r.segments.insert(e.addr, e.size);
            }
            Action::Alloc => match r.alive.remove(&e.addr) {
                Some(a) => r.sizes.push((i, a.size)),
                None => r.disagree += 1,
            },
            Action::FreeCompleted => {
                r.alive.insert(e.addr, freed_inside(e.size));
            }
            _ => {}
        }
    }
    Ok(r)
}

/// Allocated before the window: who allocated it is not known.
fn freed_inside(requested: u64) -> Alive {
    Alive {
        size: 0,
        requested,
        stack: 0,
        freed_inside: true,
    }
}

/// The earlier entries rewound from an unknown state: per address, what they set (`None`:
/// not alive), and the allocations met before they set anything, to be looked up in the
/// state the later entries leave.
#[derive(Default)]
struct Half {
    segments: Map<u64, Option<u64>>,
    alive: Map<u64, Option<Alive>>,
    /// Segment addresses, and (entry index, address) of tensors, allocated where the
    /// state is the later half's.
    open_segments: Vec<u64>,
    open_allocs: Vec<(usize, u64)>,
    sizes: Vec<(usize, u64)>,
    disagree: u64,
    times: Rewound,
}

fn rewind_half(p: &Pickle, device: i64, trace: &[Value]) -> Result<Half, String> {
    let mut h = Half::default();
    for (i, &v) in trace.iter().enumerate().rev() {
        let e = read(p, device, i, v)?;
        h.times.time(e.time_us);
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => match h.segments.insert(e.addr, None) {
                Some(Some(_)) => {}
                Some(None) => h.disagree += 1,
                None => h.open_segments.push(e.addr),
            },
            Action::SegmentFree | Action::SegmentUnmap => {
                h.segments.insert(e.addr, Some(e.size));
            }
            Action::Alloc => match h.alive.insert(e.addr, None) {
                Some(Some(a)) => h.sizes.push((i, a.size)),
                Some(None) => h.disagree += 1,
                None => h.open_allocs.push((i, e.addr)),
            },
            Action::FreeCompleted => {
                h.alive.insert(e.addr, Some(freed_inside(e.size)));
            }
            _ => {}
        }
    }
    Ok(h)
}

/// Entries `..at` rewound on a thread while `at..` are here, then joined.
fn rewind_split(
    p: &Pickle,
    device: i64,
    trace: &[Value],
    r: Rewound,
    at: usize,
) -> Result<Rewound, String> {
    let (earlier, later) = trace.split_at(at);
    let (half, later) = std::thread::scope(|s| {
        let half = std::thread::Builder::new()
            .name("snapshot-rewind".into())
            .spawn_scoped(s, || rewind_half(p, device, earlier));
        let later = rewind_from(p, device, later, at, r);
        let half = match half {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => rewind_half(p, device, earlier),
        };
        (half, later)
    });
    // An error in the later half is the one a single pass meets first.
    let mut r = later?;
    join(&mut r, half?);
    r.entries = trace.len();
    Ok(r)
}

/// The earlier half's rewind applied to the state the later half left.
fn join(r: &mut Rewound, h: Half) {
    for addr in h.open_segments {
        r.disagree += !r.segments.contains_key(&addr) as u64;
    }
    let mut sizes = h.sizes;
    for (i, addr) in h.open_allocs {
        match r.alive.get(&addr) {
            Some(a) => sizes.push((i, a.size)),
            None => r.disagree += 1,
        }
    }
    r.disagree += h.disagree;
    for (addr, set) in h.segments {
        match set {
            Some(size) => r.segments.insert(addr, size),
            None => r.segments.remove(&addr),
        };
    }
    for (addr, set) in h.alive {
        match set {
            Some(a) => r.alive.insert(addr, a),
            None => r.alive.remove(&addr),
        };
    }
    // Last first, as one pass pushes them.
    sizes.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
    r.sizes.extend(sizes);
    r.first_us = h.times.first_us.or(r.first_us);
    r.earliest_us = [r.earliest_us, h.times.earliest_us]
        .into_iter()
        .flatten()
        .min();
    r.latest_us = [r.latest_us, h.times.latest_us].into_iter().flatten().max();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::model::{Snapshot, TraceEntry};
    use crate::snapshot::pickle::parse;
    use crate::snapshot::write::memory_viz_bytes;

    /// The state each fixture's history is rewound from: its final segments and blocks
    /// (a stack id made up from the frame count, which the rewind only carries).
    fn final_state(snap: &Snapshot, device: i64) -> Rewound {
        let segments = snap.device(device).map_or(&[][..], |d| &d.segments);
        Rewound::from_final(segments, |frames| frames.len() as u64)
    }

    /// Rewound in two halves split at `at`, for every `at` in `points`, as in one pass.
    fn agrees(p: &Pickle, device: i64, start: &Rewound, points: impl Iterator<Item = usize>) {
        let Some(&list) = history::device_traces(p).unwrap().get(device as usize) else {
            return;
        };
        let trace = p.seq(list).unwrap();
        let one = rewind_serial(p, device, trace, start.clone());
        for at in points {
            let two = rewind_split(p, device, trace, start.clone(), at);
            assert_eq!(two, one, "split at {at} of {}", trace.len());
        }
    }

    #[test]
    fn real_histories_rewind_in_halves_as_in_one_pass() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/torch-snapshots");
        let mut read = 0;
        for f in std::fs::read_dir(dir).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                continue;
            }
            let p = parse(&std::fs::read(&path).unwrap()).unwrap();
            let snap = crate::snapshot::read::model_of(&p, false).unwrap();
            for d in &snap.devices {
                let traces = history::device_traces(&p).unwrap();
                let Some(&list) = traces.get(d.device as usize) else {
                    continue;
                };
                let len = p.seq(list).unwrap().len();
                let points = (0..=len).step_by(len / 40 + 1).chain([len]);
                agrees(&p, d.device, &final_state(&snap, d.device), points);
                read += 1;
            }
        }
        assert!(read >= 4, "{read} devices");
    }

    /// A history of random actions on a few addresses (reused, freed twice, allocated
    /// without a free: what an edited file or a wrapped ring holds), from a random final
    /// state, split at every entry.
    #[test]
    fn random_histories_rewind_in_halves_as_in_one_pass() {
        let mut next = crate::draws::below(0x2545_f491_4f6c_dd1d);
        let actions = [
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted,
            Action::SegmentAlloc,
            Action::SegmentFree,
            Action::SegmentMap,
            Action::SegmentUnmap,
            Action::Snapshot,
            Action::Oom,
        ];
        for _ in 0..300 {
            let len = next(40) as usize;
            let trace: Vec<TraceEntry> = (0..len)
                .map(|_| TraceEntry {
                    action: actions[next(actions.len() as u64) as usize].clone(),
                    addr: 512 * next(6),
                    size: 512 * (1 + next(4)),
                    time_us: (next(4) > 0).then(|| next(1000) as i64),
                    ..Default::default()
                })
                .collect();
            let bytes = memory_viz_bytes(&Snapshot::from_segments([], [(0, trace)]));
            let p = parse(&bytes).unwrap();
            let mut start = Rewound {
                disagree: next(3),
                first_us: (next(2) == 0).then(|| next(1000) as i64),
                earliest_us: (next(2) == 0).then(|| next(1000) as i64),
                latest_us: (next(2) == 0).then(|| next(1000) as i64),
                sizes: vec![(1000, 512)],
                ..Default::default()
            };
            for addr in 0..6 {
                if next(2) == 0 {
                    start.segments.insert(512 * addr, 4096);
                }
                if next(2) == 0 {
                    let a = Alive {
                        size: 512 * (1 + next(4)),
                        requested: 1,
                        stack: addr,
                        freed_inside: false,
                    };
                    start.alive.insert(512 * addr, a);
                }
            }
            agrees(&p, 0, &start, 0..=len);
        }
    }

    #[test]
    fn a_malformed_entry_is_reported_as_one_pass_reports_it() {
        // Two entries whose address is past i64 once patched: the later one is met first.
        const MARK: u64 = 0x7e57_0000_0000_0000;
        let entry = |addr: u64| TraceEntry {
            action: Action::Alloc,
            addr,
            size: 512,
            ..Default::default()
        };
        let mut trace: Vec<TraceEntry> = (0..100).map(|i| entry(512 * i)).collect();
        trace[20] = entry(MARK);
        trace[70] = entry(MARK);
        let mut bytes = memory_viz_bytes(&Snapshot::from_segments([], [(0, trace)]));
        let marked = MARK.to_le_bytes();
        let mut patched = 0;
        for i in 0..bytes.len() - 8 {
            if bytes[i..i + 8] == marked {
                bytes[i..i + 8].copy_from_slice(&(-5i64).to_le_bytes());
                patched += 1;
            }
        }
        assert_eq!(patched, 2);
        let p = parse(&bytes).unwrap();
        let list = history::device_traces(&p).unwrap()[0];
        let trace = p.seq(list).unwrap();
        let one = rewind_serial(&p, 0, trace, Rewound::default());
        assert!(one.as_ref().is_err_and(|e| e.contains("[70]")), "{one:?}");
        for at in [0, 10, 20, 21, 50, 70, 71, 100] {
            assert_eq!(
                rewind_split(&p, 0, trace, Rewound::default(), at),
                one,
                "at {at}"
            );
        }
    }
}
