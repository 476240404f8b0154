//! `summary`: per process and device the peak, what held it, leaks and failures; per
//! physical device the run's totals (processes sharing it summed on the common clock).

use super::categories::{self, Categories};
use super::device_split::{self, DeviceSplit};
use super::groups::{self, Group};
use super::layer::Layer;
use crate::errors;
use crate::model::ProcessModel;
use crate::replay::Run;
use crate::snapshot::events::SNAPSHOT_INTERPOSER;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use vramtrace_schema::Settings;

#[derive(Serialize)]
pub struct Summary {
    pub format: &'static str,
    pub version: u32,
    /// Wall clock at the run's time 0.
    pub start_unix_ns: u64,
    /// Run time of the last event.
    pub duration_ns: u64,
    pub processes: Vec<ProcessSummary>,
    /// Per physical device, all processes summed.
    pub devices: Vec<RunDeviceSummary>,
    /// The ranks side by side (processes with a rank only).
    pub ranks: Vec<super::ranks::RankRow>,
    /// How unevenly the ranks use memory; null below two ranks.
    pub rank_spread: Option<super::rank_spread::RankSpread>,
    pub unreadable: Vec<String>,
    /// XLA's preallocations (JAX), where found ([`super::preallocation`]).
    pub preallocations: Vec<super::preallocation::Preallocation>,
}

#[derive(Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub ppid: u32,
    pub host: String,
    pub rank: Option<String>,
    pub argv: Vec<String>,
    pub exe: String,
    /// The header's environment variables (only the few a trace may hold).
    pub env: BTreeMap<String, String>,
    /// The interposer's settings, and its version.
    pub settings: Settings,
    pub interposer: String,
    pub path: PathBuf,
    pub start_unix_ns: u64,
    pub complete: bool,
    /// The end record's reason when writing the trace failed (`write failed: ...`).
    pub cut_by: Option<String>,
    /// Calls the interposer counted but could not record (its queue was full).
    pub calls_not_recorded: u64,
    pub truncated: bool,
    /// A PyTorch snapshot: whether the file says its history was cut short (`None` for a
    /// trace).
    pub history_truncated: Option<bool>,
    pub error: Option<String>,
    pub events: u64,
    pub allocations: u64,
    pub frees: u64,
    pub failed_allocations: u64,
    pub unknown_frees: u64,
    pub leaked_blocks: u64,
    pub leaked_bytes: u64,
    pub peak_pinned_host_bytes: u64,
    /// Memory that is not device memory, each location apart (in no device figure):
    /// pinned host memory by where it lives, and managed pools' memory.
    pub memory_by_location: Vec<LocationSummary>,
    pub devices: Vec<DeviceSummary>,
    pub failures: Vec<FailureSummary>,
}

impl ProcessSummary {
    /// The command the process ran: its argv, else its executable.
    pub fn command(&self) -> String {
        if self.argv.is_empty() {
            self.exe.clone()
        } else {
            self.argv.join(" ")
        }
    }
}

#[derive(Serialize)]
pub struct LocationSummary {
    /// `host` (page-locked host memory: `cuMemHostAlloc`, host pools, `cuMemCreate` on
    /// the host), `host_numa`, `host_numa_current`, or `managed` (managed pools).
    pub location: &'static str,
    pub peak_bytes: u64,
    pub bytes_at_end: u64,
}

#[derive(Serialize)]
pub struct DeviceSummary {
    pub device: i32,
    /// The physical GPU (`CUDA_VISIBLE_DEVICES` entry, or the ordinal).
    pub gpu: String,
    pub peak_reserved_bytes: u64,
    pub peak_time_ns: u64,
    pub reserved_bytes_at_end: u64,
    /// The allocated layer (allocator annotations, a snapshot's blocks): the most block
    /// bytes live at once; null where no allocator annotated, or where some block's size
    /// is not known (a snapshot's history gives requested sizes only).
    pub peak_allocated_bytes: Option<u64>,
    /// The most requested bytes of live tensors at any moment; null without annotations.
    pub peak_requested_bytes: Option<u64>,
    pub allocated_bytes_at_end: Option<u64>,
    /// Requested bytes of the blocks live at the end (allocated minus rounding).
    pub requested_bytes_at_end: Option<u64>,
    /// The device layer: this process's most used memory by NVML, null without samples.
    pub peak_device_bytes: Option<u64>,
    /// Fragmentation at the end: the largest free piece of reserved memory between live
    /// blocks, the number of free pieces and their total; null without annotations.
    pub largest_free_block_bytes_at_end: Option<u64>,
    pub free_blocks_at_end: Option<u64>,
    pub cached_free_bytes_at_end: Option<u64>,
    /// A snapshot whose history begins after its process did (PyTorch keeps the last
    /// `max_entries`): what was alive before the first entry, counted from the final
    /// segments; null where the history reaches back to the start, and for traces.
    pub before_history: Option<BeforeHistory>,
    pub at_peak: Vec<Group>,
    /// What the tensors were for at their peak (summing to `peak_requested_bytes`) and
    /// at the end (summing to `allocated_bytes_at_end`); null where not known (a trace
    /// alone).
    pub tensor_categories_at_peak: Option<Categories>,
    pub tensor_categories_at_end: Option<Categories>,
    /// What the device memory at the reserved layer's peak was for (summing to
    /// `peak_reserved_bytes`), where a program without tensors named its allocations'
    /// categories with ranges; null otherwise.
    pub reserved_categories_at_peak: Option<Categories>,
    /// The whole of its memory at the reserved layer's peak, in one split: tensors by
    /// category, the allocator's cache, libraries, context and driver; null where nothing
    /// of it is known but its total.
    pub split_at_peak: Option<DeviceSplit>,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeforeHistory {
    pub segments: usize,
    pub tensors: usize,
    /// Of the tensors, those known only by their free inside the history (no stack).
    pub freed_inside: usize,
    pub reserved_bytes: u64,
    pub requested_bytes: u64,
}

#[derive(Serialize)]
pub struct FailureSummary {
    pub time_ns: u64,
    pub api: &'static str,
    /// Where the memory asked for lives when it is not device memory, as `oom` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<&'static str>,
    pub device: i32,
    pub requested_bytes: u64,
    pub result: i32,
    pub result_name: String,
    pub reserved_bytes: u64,
    /// The driver's figure at the failure ([`crate::model::DriverFigure`]: the same in
    /// every view), and where it comes from.
    pub driver_free_bytes: Option<u64>,
    pub driver_total_bytes: Option<u64>,
    pub driver_figure: Option<crate::model::DriverSource>,
    /// Who held the process's memory on that device at the failure, largest first: its
    /// tensors where it has them (and `--layer reserved` was not asked), else its blocks.
    /// The text's verdict names them; not in the JSON, whose keys stay those of
    /// docs/json.md (`oom --json` has them, as `live_groups` and `tensor_groups`).
    #[serde(skip)]
    pub held: Vec<Group>,
    /// `tensor` or `block`: what [`Self::held`] counts.
    #[serde(skip)]
    pub held_unit: &'static str,
    /// What the live tensors were for at the failure, in requested bytes; null where not
    /// known.
    pub tensor_categories: Option<Categories>,
    /// What the device memory held was for (summing to `reserved_bytes`), where a program
    /// without tensors named its allocations' categories with ranges; null otherwise.
    pub reserved_categories: Option<Categories>,
    /// The whole of its memory on that device at the failure, split as `split_at_peak`.
    pub split: Option<DeviceSplit>,
}

#[derive(Serialize)]
pub struct RunDeviceSummary {
    pub host: String,
    pub gpu: String,
    /// The layer the text lists the groups at the peak of: `allocated` (`tensors_at_peak`)
    /// where this GPU has tensors and `--layer reserved` was not asked, else `reserved`
    /// (`at_peak`).
    pub layer: &'static str,
    /// Processes that held memory on it.
    pub pids: Vec<u32>,
    pub peak_reserved_bytes: u64,
    pub peak_time_ns: u64,
    pub reserved_bytes_at_end: u64,
    /// What held the run's peak on this device, by process and group.
    pub at_peak: Vec<Group>,
    /// The allocated layer, every process summed: the most requested bytes of live
    /// tensors, and the tensors then by process and who asked; null and empty without it.
    pub peak_requested_bytes: Option<u64>,
    pub tensors_at_peak: Vec<Group>,
}

/// The GPU with the highest peak (the first of equal ones), as the verdicts of `summary`
/// and `report` name it.
pub struct HighestPeak<'a> {
    pub device: &'a RunDeviceSummary,
    /// `The peak`, or `The highest peak of 4 GPUs`.
    pub title: String,
    /// ` (3.0 GiB in tensors at their own peak)` where tensors are known, else empty.
    pub tensors: String,
}

impl Summary {
    pub fn highest_peak(&self) -> Option<HighestPeak<'_>> {
        let device = self
            .devices
            .iter()
            .rev()
            .max_by_key(|d| d.peak_reserved_bytes)?;
        let title = if self.devices.len() > 1 {
            format!("The highest peak of {} GPUs", self.devices.len())
        } else {
            "The peak".into()
        };
        let tensors = device
            .peak_requested_bytes
            .map(|t| format!(" ({} in tensors at their own peak)", crate::units::bytes(t)))
            .unwrap_or_default();
        Some(HighestPeak {
            device,
            title,
            tensors,
        })
    }
}

/// Device memory still held at the end: (blocks, bytes).
pub fn leaked(p: &ProcessModel) -> (u64, u64) {
    p.live_blocks()
        .filter(|b| b.kind().is_device_memory())
        .fold((0, 0), |(n, bytes), b| (n + 1, bytes + b.size))
}

/// The summary at the default layer (tensors where known).
pub fn build(run: &Run) -> Summary {
    build_at(run, None)
}

/// `layer`: the one whose groups the text lists at each GPU's peak (`--layer`).
pub fn build_at(run: &Run, layer: Option<Layer>) -> Summary {
    let processes: Vec<ProcessSummary> = run
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| process(run, i, p, layer))
        .collect();
    let devices = run
        .devices
        .devices
        .iter()
        .enumerate()
        .map(|(index, (id, usage))| {
            let mut pids: Vec<u32> = groups::ordinals(run, index)
                .keys()
                .map(|&p| run.processes[p].header.pid)
                .collect();
            pids.sort_unstable();
            let tensors = run.tensors.devices.iter().find(|(t, _)| t == id);
            let shown = match (layer, tensors) {
                (Some(Layer::Reserved), _) | (_, None) => Layer::Reserved,
                _ => Layer::Allocated,
            };
            RunDeviceSummary {
                host: id.host.clone(),
                gpu: id.gpu.clone(),
                layer: shown.name(),
                pids,
                peak_reserved_bytes: usage.peak_reserved,
                peak_time_ns: usage.peak_t,
                reserved_bytes_at_end: usage.reserved,
                at_peak: groups::run_device_groups(run, index, usage, true),
                peak_requested_bytes: tensors.map(|(_, t)| t.peak_reserved),
                tensors_at_peak: tensors
                    .map(|(_, t)| groups::run_device_groups(run, index, t, true))
                    .unwrap_or_default(),
            }
        })
        .collect::<Vec<_>>();
    let mut devices = devices;
    devices.sort_by(|a, b| (&a.host, &a.gpu).cmp(&(&b.host, &b.gpu)));
    let ranks = super::ranks::rows(&processes);
    let rank_spread = super::rank_spread::of(run, &processes, &ranks);
    Summary {
        format: "vramtrace-summary",
        version: super::JSON_VERSION,
        start_unix_ns: run.start_unix_ns,
        duration_ns: run.end_time,
        ranks,
        rank_spread,
        processes,
        devices,
        unreadable: run.unreadable.iter().map(|e| e.to_string()).collect(),
        preallocations: Vec::new(),
    }
}

/// Why the interposer stopped writing this trace, if it said so.
fn cut_by(p: &ProcessModel) -> Option<String> {
    p.notes.end.as_ref()?.write_failure().map(str::to_string)
}

fn process(run: &Run, i: usize, p: &ProcessModel, layer: Option<Layer>) -> ProcessSummary {
    let (leaked_blocks, leaked_bytes) = leaked(p);
    ProcessSummary {
        pid: p.header.pid,
        ppid: p.header.ppid,
        host: p.header.host.clone(),
        rank: p.rank().map(str::to_string),
        argv: p.header.argv.clone(),
        exe: p.header.exe.clone(),
        env: p.header.env.clone(),
        settings: p.header.settings.clone(),
        interposer: p.header.interposer.clone(),
        path: crate::pack::shown(&p.path),
        start_unix_ns: p.header.start_unix_ns,
        complete: p.ended() && cut_by(p).is_none(),
        cut_by: cut_by(p),
        calls_not_recorded: p.notes.lost_calls,
        truncated: p.notes.truncated_line.is_some(),
        history_truncated: (p.header.interposer == SNAPSHOT_INTERPOSER)
            .then_some(!p.history_truncated.is_empty()),
        error: p.error.as_ref().map(|e| e.to_string()),
        events: p.counts.events,
        allocations: p.counts.allocations,
        frees: p.counts.frees,
        failed_allocations: p.counts.failed_allocations,
        unknown_frees: p.counts.unknown_frees,
        leaked_blocks,
        leaked_bytes,
        peak_pinned_host_bytes: p.peak_pinned_host,
        memory_by_location: p
            .off_device
            .locations()
            .map(|l| LocationSummary {
                location: l.location.name(),
                peak_bytes: l.peak,
                bytes_at_end: l.now,
            })
            .collect(),
        devices: p
            .devices
            .values()
            .map(|d| {
                let state = p.end_allocator_state(d.device);
                DeviceSummary {
                    device: d.device,
                    gpu: crate::replay::DeviceId::of(&p.header, d.device).gpu,
                    peak_reserved_bytes: d.peak_reserved,
                    peak_time_ns: run.time_of(i, d.peak_t),
                    reserved_bytes_at_end: d.reserved,
                    peak_allocated_bytes: annotated(p, d.device)
                        .filter(|l| !l.sizes_unknown)
                        .map(|l| l.peak_allocated),
                    peak_requested_bytes: annotated(p, d.device)
                        .and(p.layers.tensors.get(&d.device))
                        .map(|t| t.peak_reserved),
                    allocated_bytes_at_end: annotated(p, d.device).map(|l| l.allocated),
                    requested_bytes_at_end: annotated(p, d.device).map(|l| l.requested),
                    peak_device_bytes: p.layers.devices.get(&d.device).and_then(|l| l.peak_device),
                    largest_free_block_bytes_at_end: state.map(|s| s.largest_free_block_bytes),
                    free_blocks_at_end: state.map(|s| s.free_blocks),
                    cached_free_bytes_at_end: state.map(|s| s.cached_free_bytes),
                    before_history: p
                        .windows
                        .get(&d.device)
                        .filter(|w| w.entries > 0 && (w.segments > 0 || w.tensors > 0))
                        .map(|w| BeforeHistory {
                            segments: w.segments,
                            tensors: w.tensors,
                            freed_inside: w.freed_inside,
                            reserved_bytes: w.reserved,
                            requested_bytes: w.requested,
                        }),
                    at_peak: groups::of_process(p, &d.peak_groups),
                    tensor_categories_at_peak: annotated(p, d.device)
                        .and(p.layers.tensors.get(&d.device))
                        .and_then(|t| categories::of_groups(p, &t.peak_groups)),
                    tensor_categories_at_end: categories::at_end(p, d.device),
                    reserved_categories_at_peak: match annotated(p, d.device) {
                        Some(_) => None,
                        None => categories::of_reserved_groups(p, &d.peak_groups),
                    },
                    split_at_peak: device_split::at_peak(p, d.device),
                }
            })
            .collect(),
        failures: p
            .failures
            .iter()
            .map(|f| {
                let (held, held_unit) = held_at(p, f, layer);
                FailureSummary {
                    time_ns: run.time_of(i, f.event.t),
                    api: f.event.api.name(),
                    location: f.event.loc.off_device(f.event.kind()).map(|l| l.name()),
                    device: f.event.dev,
                    requested_bytes: f.requested,
                    result: f.event.res,
                    result_name: errors::name(f.event.api, f.event.res),
                    reserved_bytes: f.reserved_on_device,
                    driver_free_bytes: f.driver_at_failure().map(|d| d.free),
                    driver_total_bytes: f.driver_at_failure().and_then(|d| d.total),
                    driver_figure: f.driver_at_failure().map(|d| d.source),
                    held,
                    held_unit,
                    tensor_categories: categories::of_groups(p, &f.tensors),
                    reserved_categories: match f.tensors.is_empty() {
                        true => categories::of_reserved_at_failure(f),
                        false => None,
                    },
                    split: device_split::at_failure(p, f),
                }
            })
            .collect(),
    }
}

impl RunDeviceSummary {
    /// The split of the GPU's memory at its peak: its one process's at that process's
    /// reserved peak, which is the GPU's; `None` where processes shared it.
    pub fn split_at_peak<'a>(&self, s: &'a Summary) -> Option<&'a DeviceSplit> {
        let [pid] = self.pids.as_slice() else {
            return None;
        };
        s.processes
            .iter()
            .filter(|p| p.pid == *pid && p.host == self.host)
            .flat_map(|p| &p.devices)
            .find(|pd| pd.gpu == self.gpu)
            .and_then(|pd| pd.split_at_peak.as_ref())
    }
}

/// Who held the memory at failure `f`, at the layer the text shows, and its unit.
fn held_at(
    p: &ProcessModel,
    f: &crate::model::Failure,
    layer: Option<Layer>,
) -> (Vec<Group>, &'static str) {
    let tensors = groups::of_process(p, &f.tensors);
    if layer == Some(Layer::Reserved) || tensors.is_empty() {
        (groups::of_process(p, &f.groups), "block")
    } else {
        (tensors, "tensor")
    }
}

fn annotated(p: &ProcessModel, dev: i32) -> Option<&crate::model::layers::DeviceLayers> {
    p.layers.devices.get(&dev).filter(|l| l.annotated)
}
