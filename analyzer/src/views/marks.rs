//! What a plot of the run marks besides the bytes: the program's markers and phases
//! (`vramtrace_marker` records; a phase is `NAME` ... `/NAME` in one process) and each
//! device's capacity, as the driver or NVML told it.

use crate::model::Map;
use crate::replay::{DeviceId, Run, Step};
use serde::Serialize;
use vramtrace_schema::{Api, Op};

/// Markers kept per run: a loop that marks every step would otherwise grow without end.
pub const MAX_MARKERS: usize = 10_000;

/// Fed with every step of a replay; [`MarkWatch::finish`] gives the marks.
#[derive(Default)]
pub struct MarkWatch {
    /// (process, name id, run time)
    seen: Vec<(usize, u64, u64)>,
    dropped: u64,
    capacity: Map<DeviceId, u64>,
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub time_ns: u64,
    pub name: String,
    pub pid: u32,
    /// The process's index in the run.
    #[serde(skip)]
    pub process: usize,
}

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    pub name: String,
    pub pid: u32,
    /// The process's index in the run.
    #[serde(skip)]
    pub process: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

#[derive(Serialize, Default)]
pub struct Marks {
    /// Markers that open or close no phase.
    pub markers: Vec<Marker>,
    pub phases: Vec<Phase>,
    /// Markers seen past [`MAX_MARKERS`], not kept.
    pub dropped: u64,
    /// The total memory of each device, as the driver (`cuMemGetInfo`) or NVML said.
    #[serde(skip)]
    pub capacity: Map<DeviceId, u64>,
}

impl MarkWatch {
    pub fn step(&mut self, step: &Step) {
        if step.ended {
            return;
        }
        let e = step.event;
        match e.api.op() {
            Op::Marker if !step.is_program_marker() => {}
            Op::Marker => {
                if self.seen.len() < MAX_MARKERS {
                    let id = e.handle.unwrap_or(0);
                    self.seen.push((step.process, id, step.time));
                } else {
                    self.dropped += 1;
                }
            }
            Op::Meminfo | Op::DeviceSample if e.ok() => {
                let Some(total) = e.total.filter(|&t| t > 0) else {
                    return;
                };
                // NVML numbers devices physically; the runtime, through CUDA_VISIBLE_DEVICES.
                let id = if e.api == Api::NvmlSample {
                    DeviceId {
                        host: step.model.header.host.clone(),
                        gpu: e.dev.to_string(),
                    }
                } else {
                    DeviceId::of(&step.model.header, e.dev)
                };
                self.capacity.insert(id, total);
            }
            _ => {}
        }
    }

    /// Names are read with the trace (their records come before their first use), so
    /// they are looked up once the run is loaded.
    pub fn finish(self, run: &Run) -> Marks {
        let mut markers = Vec::new();
        // A marker that may open a phase, and where that phase ended.
        let mut phases: Vec<(Marker, Option<u64>)> = Vec::new();
        // Open phases: (process, name) -> index in `phases`.
        let mut open: Map<(usize, String), Vec<usize>> = Map::default();
        for (p, id, time) in self.seen {
            let model = &run.processes[p];
            let name = model
                .names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("marker {id}"));
            let pid = model.header.pid;
            if let Some(begun) = name.strip_prefix('/') {
                if let Some(i) = open.get_mut(&(p, begun.to_string())).and_then(Vec::pop) {
                    phases[i].1 = Some(time);
                    continue;
                }
            } else {
                // Any name may open a phase: whether it did is known when `/NAME` comes.
                open.entry((p, name.clone()))
                    .or_default()
                    .push(phases.len());
                phases.push((
                    Marker {
                        time_ns: time,
                        name,
                        pid,
                        process: p,
                    },
                    None,
                ));
                continue;
            }
            markers.push(Marker {
                time_ns: time,
                name,
                pid,
                process: p,
            });
        }
        // A name never closed was a plain marker (Python's `phase` closes its phase on
        // an exception too).
        let mut ended = Vec::new();
        for (m, end) in phases {
            match end {
                Some(end_ns) => ended.push(Phase {
                    name: m.name,
                    pid: m.pid,
                    process: m.process,
                    start_ns: m.time_ns,
                    end_ns,
                }),
                None => markers.push(m),
            }
        }
        let mut phases = ended;
        markers.sort_by_key(|m| m.time_ns);
        phases.sort_by_key(|p| p.start_ns);
        Marks {
            markers,
            phases,
            dropped: self.dropped,
            capacity: self.capacity,
        }
    }
}
