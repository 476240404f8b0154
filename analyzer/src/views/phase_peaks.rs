//! The peak inside each phase of a run (`vramtrace.phase`: a marker `NAME` closed by
//! `/NAME` in the same process), at the reserved and the allocated layer, so that `diff`
//! can compare two runs phase by phase ("forward #3: +16.0 MiB").
//!
//! A phase starts and ends at markers, so the replay keeps, per process, the most bytes
//! held between each two of its markers: a phase's peak is the most of the stretches it
//! spans. One comparison per event, and memory for the markers only (at most
//! [`MAX_MARKERS`] a run, as every view keeps).

use super::marks::MAX_MARKERS;
use crate::replay::{Run, Step};
use serde::Serialize;
use std::collections::BTreeMap;

/// Bytes held by a process, summed over its devices.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Held {
    reserved: u64,
    /// Live tensors' requested bytes; `None` where no allocator annotated its blocks.
    allocated: Option<u64>,
}

impl Held {
    fn max(self, o: Held) -> Held {
        Held {
            reserved: self.reserved.max(o.reserved),
            allocated: match (self.allocated, o.allocated) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            },
        }
    }
}

/// One process's markers: (name id, run time, the most held from the marker before it
/// up to this one).
#[derive(Default)]
struct Track {
    marks: Vec<(u64, u64, Held)>,
    /// The most held since the last marker, that marker's moment included.
    since: Held,
}

/// Fed with every step of a replay; [`PhaseWatch::finish`] gives the phases' peaks.
#[derive(Default)]
pub struct PhaseWatch {
    tracks: BTreeMap<usize, Track>,
    kept: usize,
    dropped: u64,
}

/// A run's phases, in the order they started.
#[derive(Default)]
pub struct PhasePeaks {
    pub phases: Vec<PhasePeak>,
    /// Markers past [`MAX_MARKERS`], not kept: phases they would close are missing.
    pub markers_not_kept: u64,
}

/// One phase of one process, and the most it held inside.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct PhasePeak {
    pub name: String,
    /// Its place among the process's phases of that name: 1 for the first.
    pub occurrence: u32,
    pub pid: u32,
    pub rank: Option<String>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub peak_reserved_bytes: u64,
    /// Tensors' requested bytes at their most inside the phase, where known.
    pub peak_allocated_bytes: Option<u64>,
    /// The process's index in the run.
    #[serde(skip)]
    pub process: usize,
}

fn held(step: &Step) -> Held {
    let m = step.model;
    let reserved = m.devices.values().map(|d| d.reserved).sum();
    let annotated = m.layers.devices.values().any(|l| l.annotated);
    let allocated = annotated.then(|| m.layers.devices.values().map(|l| l.requested).sum());
    Held {
        reserved,
        allocated,
    }
}

impl PhaseWatch {
    pub fn step(&mut self, step: &Step) {
        if step.ended {
            return;
        }
        let is_marker = step.is_program_marker();
        if is_marker && self.kept >= MAX_MARKERS {
            self.dropped += 1;
        }
        let Some(track) = self.tracks.get_mut(&step.process) else {
            // Nothing to measure before a process's first marker.
            if is_marker && self.kept < MAX_MARKERS {
                let now = held(step);
                let id = step.event.handle.unwrap_or(0);
                let track = Track {
                    marks: vec![(id, step.time, now)],
                    since: now,
                };
                self.tracks.insert(step.process, track);
                self.kept += 1;
            }
            return;
        };
        let now = held(step);
        track.since = track.since.max(now);
        if is_marker && self.kept < MAX_MARKERS {
            let id = step.event.handle.unwrap_or(0);
            track.marks.push((id, step.time, track.since));
            track.since = now;
            self.kept += 1;
        }
    }

    /// Pairs each `/NAME` with the latest open `NAME` of its process (names are read with
    /// the trace, so they are looked up once the run is loaded).
    pub fn finish(self, run: &Run) -> PhasePeaks {
        let mut phases = Vec::new();
        for (p, track) in self.tracks {
            let model = &run.processes[p];
            let name_of = |id: u64| model.names.get(&id).cloned();
            // Open phases by name: the index of their start marker.
            let mut open: BTreeMap<String, Vec<usize>> = BTreeMap::new();
            let mut count: BTreeMap<String, u32> = BTreeMap::new();
            for (i, &(id, time, _)) in track.marks.iter().enumerate() {
                let Some(name) = name_of(id) else { continue };
                if let Some(begun) = name.strip_prefix('/') {
                    let Some(start) = open.get_mut(begun).and_then(Vec::pop) else {
                        continue;
                    };
                    // The stretches after the start marker, up to this one; the start's own
                    // moment is in the first.
                    let peak = track.marks[start + 1..=i]
                        .iter()
                        .fold(Held::default(), |m, x| m.max(x.2));
                    let n = count.entry(begun.to_string()).or_default();
                    *n += 1;
                    phases.push(PhasePeak {
                        name: begun.to_string(),
                        occurrence: *n,
                        pid: model.header.pid,
                        rank: model.rank().map(str::to_string),
                        start_ns: track.marks[start].1,
                        end_ns: time,
                        peak_reserved_bytes: peak.reserved,
                        peak_allocated_bytes: peak.allocated,
                        process: p,
                    });
                } else {
                    open.entry(name).or_default().push(i);
                }
            }
        }
        phases.sort_by_key(|p| (p.start_ns, p.process));
        PhasePeaks {
            phases,
            markers_not_kept: self.dropped,
        }
    }
}
