//! `report`: what the one-page report says, computed from the other views: the verdict
//! in one sentence, a plot and the live set at moments per GPU, who held each peak and
//! each failure, and memory still held at the end told apart as leaks (a process that
//! exited normally kept it), a caching allocator's cache at exit, or what was simply live
//! when the program died (killed, or ended by a failed allocation) or when a snapshot
//! was dumped.

use super::ending::Ending;
use super::groups::Group;
use super::layer::Layer;
use super::leaks::{LeakGroup, Leaks};
use super::moments::Moment;
use super::oom::OomView;
use super::plot::DevicePlot;
use super::summary::Summary;
use crate::replay::devices::gpu_label;
use crate::units::{self, bytes};
use serde::Serialize;

/// Groups kept per flamegraph (the rest are summed into the top of the graph's width).
pub const GRAPH_GROUPS: usize = 300;
/// Failures given a flamegraph of their own.
pub const FAILURE_GRAPHS: usize = 4;
/// GPUs drawn at most; past it the page draws the worst and lists the others.
pub const MOST_PLOTS: usize = 32;

#[derive(Serialize)]
pub struct ReportView {
    /// The verdict: out of memory or not, the peak, leaks; one sentence each.
    pub verdict: Vec<String>,
    /// The run's command (the first process's argv).
    pub command: String,
    /// The run is one moment: a snapshot without times (PyTorch before 2.2). Its times
    /// are all 0, so the page says "at its dump" instead of "at 0.000s".
    pub timeless: bool,
    /// A section each, in rank order where ranks are known (the GPU's order otherwise);
    /// past [`MOST_PLOTS`], the worst first: those that failed, then by peak.
    pub plots: Vec<DevicePlot>,
    /// The GPUs each of the summary's ranks ran on (`GPU 0, GPU 1`), in its order.
    pub rank_gpus: Vec<String>,
    pub moments: Vec<Moment>,
    /// Who held each GPU's peak: tensors where the run has them, else reserved memory.
    pub peaks: Vec<Held>,
    /// Who held memory at each failure (the first [`FAILURE_GRAPHS`]).
    pub failures: Vec<Held>,
    pub at_end: AtEnd,
}

#[derive(Serialize)]
pub struct Held {
    pub title: String,
    pub host: String,
    pub gpu: String,
    pub time_ns: u64,
    pub bytes: u64,
    /// Blocks or tensors live then, in every group (not only those kept).
    pub count: u64,
    /// `allocated` (tensors, requested bytes) or `reserved`.
    pub layer: &'static str,
    /// Groups live then, kept or not.
    pub group_count: u64,
    /// The largest [`GRAPH_GROUPS`] groups.
    pub groups: Vec<Group>,
}

/// Memory held when each process's trace ended, by why it was still held.
#[derive(Serialize, Default)]
pub struct AtEnd {
    /// Never freed by a process that exited normally: tensors where an allocator told
    /// them (its reserved segments are its cache), blocks otherwise.
    pub leaked: Vec<EndRow>,
    pub leaked_bytes: u64,
    /// A caching allocator's reserved memory still held at a normal exit, less leaks.
    pub cached_bytes: u64,
    /// Live when the process died (killed, or after a failed allocation) or when a
    /// snapshot was dumped: not leaks, the state at that moment.
    pub live_at_death: Vec<EndRow>,
    pub live_at_death_bytes: u64,
    /// How the processes that held it ended ([`EndRow::ending`]), each once.
    pub endings: Vec<Ending>,
}

#[derive(Serialize, Clone)]
pub struct EndRow {
    pub pid: u32,
    /// `pid N`, or a snapshot's file name (process_name.rs).
    pub process: String,
    pub device: i32,
    /// `tensors` (allocated layer) or `blocks`.
    pub unit: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub who: String,
    /// Why it was held: `exited`, `killed`, `failed allocation`, `snapshot`.
    pub ending: &'static str,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
}

pub struct Inputs<'a> {
    pub run: &'a crate::replay::Run,
    pub summary: &'a Summary,
    pub oom: &'a OomView,
    pub leaks: &'a Leaks,
    pub plots: Vec<DevicePlot>,
    pub moments: super::moments::MomentWatch,
}

pub fn build(i: Inputs) -> ReportView {
    let s = i.summary;
    let many_hosts = s.devices.iter().any(|d| d.host != s.devices[0].host);
    let peaks: Vec<Held> = s
        .devices
        .iter()
        .map(|d| {
            let tensors = d.peak_requested_bytes.is_some() && !d.tensors_at_peak.is_empty();
            // The tensors' own peak comes at its own time.
            let tensor_peak = i
                .run
                .tensors
                .devices
                .iter()
                .find(|(id, _)| id.host == d.host && id.gpu == d.gpu)
                .map_or(d.peak_time_ns, |(_, u)| u.peak_t);
            let (layer, groups, bytes, time_ns) = if tensors {
                let b = d.peak_requested_bytes.unwrap_or(0);
                ("allocated", &d.tensors_at_peak, b, tensor_peak)
            } else {
                (
                    "reserved",
                    &d.at_peak,
                    d.peak_reserved_bytes,
                    d.peak_time_ns,
                )
            };
            Held {
                title: gpu_label(&d.host, &d.gpu, many_hosts),
                host: d.host.clone(),
                gpu: d.gpu.clone(),
                time_ns,
                bytes,
                count: groups.iter().map(|g| g.blocks).sum(),
                layer,
                group_count: groups.len() as u64,
                groups: groups.iter().take(GRAPH_GROUPS).cloned().collect(),
            }
        })
        .collect();
    let failures = i
        .oom
        .failures
        .iter()
        .take(FAILURE_GRAPHS)
        .map(|f| {
            // The layer `vramtrace oom` answers at (the report's watch has no `--layer`):
            // where the tensors are known, none live is an answer, not a reason to show
            // the device's blocks instead.
            let tensors = f.layer == Layer::Allocated.name();
            let groups = if tensors {
                &f.tensor_groups
            } else {
                &f.live_groups
            };
            Held {
                title: format!(
                    "{} of {} failed on {}",
                    f.api,
                    bytes(f.requested_bytes),
                    gpu_label(&f.host, &f.gpu, many_hosts)
                ),
                host: f.host.clone(),
                gpu: f.gpu.clone(),
                time_ns: f.time_ns,
                bytes: f.tensor_bytes.filter(|_| tensors).unwrap_or(f.live_bytes),
                count: if tensors {
                    f.tensor_groups.iter().map(|g| g.blocks).sum()
                } else {
                    f.live_blocks
                },
                layer: if tensors { "allocated" } else { "reserved" },
                group_count: groups.len() as u64,
                // A post-mortem's groups are its process's own: name the process.
                groups: groups
                    .iter()
                    .take(GRAPH_GROUPS)
                    .map(|g| Group {
                        pid: g.pid.or(Some(f.pid)),
                        ..g.clone()
                    })
                    .collect(),
            }
        })
        .collect();
    let at_end = at_end(s, i.leaks);
    let mut plots = i.plots;
    plots.sort_by(|a, b| rank_order(a).cmp(&rank_order(b)));
    if plots.len() > MOST_PLOTS {
        // Only some are drawn: the worst, failed first (by their first failure), then by
        // peak; equal ones stay in rank order.
        plots.sort_by_key(|p| {
            (
                p.failures
                    .iter()
                    .map(|f| f.time_ns)
                    .min()
                    .unwrap_or(u64::MAX),
                std::cmp::Reverse(p.peak_bytes),
            )
        });
    }
    let rank_gpus = s
        .ranks
        .iter()
        .map(|r| {
            let gpus: Vec<String> = s
                .devices
                .iter()
                .filter(|d| d.host == r.host && d.pids.contains(&r.pid))
                .map(|d| gpu_label(&d.host, &d.gpu, many_hosts))
                .collect();
            gpus.join(", ")
        })
        .collect();
    // The live sets of the GPUs drawn alone.
    let moments = i.moments.finish(i.run, |id| {
        plots
            .iter()
            .take(MOST_PLOTS)
            .any(|p| p.host == id.host && p.gpu == id.gpu)
    });
    ReportView {
        verdict: verdict(s, i.oom, &at_end, &plots, many_hosts),
        command: s.processes.first().map(|p| p.command()).unwrap_or_default(),
        plots,
        rank_gpus,
        timeless: s.duration_ns == 0,
        moments,
        peaks,
        failures,
        at_end,
    }
}

/// Plots with ranks first, by their first rank.
fn rank_order(p: &DevicePlot) -> (bool, Option<(Option<u64>, &str)>) {
    (
        p.ranks.is_empty(),
        p.ranks.first().map(|r| super::ranks::order(r)),
    )
}

impl ReportView {
    /// `0.123s`, or `its dump` for a run without times.
    pub fn when(&self, t: u64) -> String {
        if self.timeless {
            "its dump".into()
        } else {
            units::seconds(t)
        }
    }
}

fn row(s: &Summary, g: &LeakGroup, unit: &'static str, ending: Ending) -> EndRow {
    EndRow {
        pid: g.pid,
        process: super::process_name::of(s, &g.host, g.pid),
        device: g.device,
        unit,
        count: g.blocks,
        bytes: g.bytes,
        who: g.who(),
        ending: ending.name(),
        first_time_ns: g.first_time_ns,
        last_time_ns: g.last_time_ns,
    }
}

fn at_end(s: &Summary, leaks: &Leaks) -> AtEnd {
    let mut out = AtEnd::default();
    // Processes whose tensors are known: their leaks are tensors.
    let with_tensors: Vec<u32> = leaks.tensor_groups.iter().map(|g| g.pid).collect();
    let has_tensors = |pid: u32| {
        with_tensors.contains(&pid)
            || s.processes
                .iter()
                .any(|p| p.pid == pid && p.devices.iter().any(|d| d.peak_requested_bytes.is_some()))
    };
    // Device memory only, as `leaks` counts it: a managed pool's or a host pool's bytes
    // (CUDA 13) are not device memory the process leaked.
    for g in leaks.groups.iter().filter(|g| g.device_memory()) {
        let ending = Ending::of(s, g.pid);
        if ending != Ending::Exited {
            out.live_at_death_bytes = out.live_at_death_bytes.saturating_add(g.bytes);
            out.live_at_death.push(row(s, g, "blocks", ending));
            if !out.endings.contains(&ending) {
                out.endings.push(ending);
            }
        } else if has_tensors(g.pid) {
            out.cached_bytes = out.cached_bytes.saturating_add(g.bytes);
        } else {
            out.leaked_bytes = out.leaked_bytes.saturating_add(g.bytes);
            out.leaked.push(row(s, g, "blocks", ending));
        }
    }
    for g in &leaks.tensor_groups {
        let ending = Ending::of(s, g.pid);
        if ending == Ending::Exited {
            out.leaked_bytes = out.leaked_bytes.saturating_add(g.bytes);
            out.cached_bytes = out.cached_bytes.saturating_sub(g.bytes);
            out.leaked.push(row(s, g, "tensors", ending));
        }
    }
    out.leaked.sort_by_key(|r| std::cmp::Reverse(r.bytes));
    out
}

fn verdict(
    s: &Summary,
    oom: &OomView,
    end: &AtEnd,
    plots: &[DevicePlot],
    many_hosts: bool,
) -> Vec<String> {
    let mut v = Vec::new();
    // A snapshot without times is one moment: no time is worth saying.
    let secs = |t: u64| {
        if s.duration_ns == 0 {
            "its dump".to_string()
        } else {
            units::seconds(t)
        }
    };
    let failed: u64 = s.processes.iter().map(|p| p.failed_allocations).sum();
    if let Some(f) = oom.failures.first() {
        let capacity = plots
            .iter()
            .find(|p| p.host == f.host && p.gpu == f.gpu)
            .and_then(|p| p.capacity_bytes)
            .or(f.driver_total_bytes);
        let of = capacity
            .map(|c| format!(" of its {}", bytes(c)))
            .unwrap_or_default();
        let rank = f
            .rank
            .as_ref()
            .map(|r| format!(" (rank {r})"))
            .unwrap_or_default();
        let more = if failed > 1 {
            format!(" {} failed in all.", units::count(failed, "allocation"))
        } else {
            String::new()
        };
        let who = super::process_name::of(s, &f.host, f.pid);
        v.push(match f.location {
            // Host or managed pool memory: no GPU ran out.
            Some(l) => format!(
                "Out of memory: {} of {} failed at {}, {who}{rank}: {l} memory, not the device's.{more}",
                f.api,
                bytes(f.requested_bytes),
                secs(f.time_ns),
            ),
            None => format!(
                "Out of memory: {} of {} failed on {} at {}, {who}{rank} holding {}{of}.{more}",
                f.api,
                bytes(f.requested_bytes),
                gpu_label(&f.host, &f.gpu, many_hosts),
                secs(f.time_ns),
                bytes(f.live_bytes),
            ),
        });
        if let Some(split) = &f.split {
            v.push(format!(
                "All of it then: {}.",
                super::device_split::line(split)
            ));
        }
    }
    if let Some(super::summary::HighestPeak {
        device: d,
        title: highest,
        tensors,
    }) = s.highest_peak()
    {
        let capacity = plots
            .iter()
            .find(|p| p.host == d.host && p.gpu == d.gpu)
            .and_then(|p| p.capacity_bytes)
            .map(|c| format!(" of {}", bytes(c)))
            .unwrap_or_default();
        let failures = match (oom.failures.is_empty(), failed) {
            (true, 0) => " No allocation failed.".to_string(),
            (true, n) => format!(" {} failed.", units::count(n, "allocation")),
            _ => String::new(),
        };
        v.push(format!(
            "{highest}: {}{capacity} reserved on {} at {}{tensors}.{failures}",
            bytes(d.peak_reserved_bytes),
            gpu_label(&d.host, &d.gpu, many_hosts),
            secs(d.peak_time_ns),
        ));
        if let Some(split) = d.split_at_peak(s) {
            v.push(format!(
                "At the peak: {}.",
                super::device_split::line(split)
            ));
        }
    }
    let leaked = if end.leaked_bytes > 0 {
        let n: u64 = end.leaked.iter().map(|r| r.count).sum();
        let unit = end.leaked.first().map_or("block", |r| {
            if r.unit == "tensors" {
                "tensor"
            } else {
                "block"
            }
        });
        format!(
            "Leaked: {} in {} never freed by processes that exited normally",
            bytes(end.leaked_bytes),
            units::count(n, unit)
        )
    } else {
        "Nothing leaked".into()
    };
    let died = super::ending::not_a_leak(end.live_at_death_bytes, &end.endings, "live");
    let end_sentence = format!("{leaked}{died}.");
    // Without a failure, a leak is the news.
    if oom.failures.is_empty() && end.leaked_bytes > 0 {
        v.insert(0, end_sentence);
    } else {
        v.push(end_sentence);
    }
    v
}
