//! `oom`: a post-mortem of each failed allocation. The replay is watched so that each
//! failure sees the whole run at that moment: what this process held and in which groups,
//! what other traced processes held on the same GPU, and what the driver last said was
//! free (with what the traced processes held when it said so, which tells how much memory
//! is held by things vramtrace does not see: CUDA contexts, libraries, other programs).

use super::groups::{self, Group};
use super::layer::Layer;
use crate::errors;
use crate::model::{DriverFigure, DriverSource};
use crate::replay::{Run, Step};
use serde::Serialize;
use vramtrace_schema::{Api, Event, Op};

/// The last `cuMemGetInfo` answer a process got, and the traced bytes on that GPU then.
#[derive(Clone, Copy, Debug)]
struct Meminfo {
    free: u64,
    total: u64,
    traced: u64,
    time: u64,
}

struct Pending {
    process: usize,
    failure: usize,
    time: u64,
    others: Vec<(usize, u64)>,
    meminfo: Option<Meminfo>,
}

/// Fed with every step of a replay; [`OomWatch::finish`] gives the view.
#[derive(Default)]
pub struct OomWatch {
    meminfo: Vec<Option<Meminfo>>,
    pending: Vec<Pending>,
    /// The layer asked for (`--layer`).
    layer: Option<Layer>,
}

impl OomWatch {
    /// A watch whose post-mortems answer at `layer` (by default, tensors where known).
    pub fn at_layer(layer: Option<Layer>) -> Self {
        OomWatch {
            layer,
            ..OomWatch::default()
        }
    }

    pub fn step(&mut self, step: &Step) {
        if step.ended {
            return;
        }
        let e = step.event;
        if self.meminfo.len() <= step.process {
            self.meminfo.resize(step.process + 1, None);
        }
        // The run device is looked up only for the few events that need it, not for
        // each of millions of allocations and frees.
        let run_device = || step.devices.lookup(step.process, e.dev);
        match e.api.op() {
            Op::Meminfo if e.ok() => {
                if let (Some(free), Some(total)) = (e.free, e.total) {
                    let traced = run_device().map_or(0, |i| step.devices.devices[i].1.reserved);
                    // vramtrace's own question right after a failure is the driver's
                    // figure at it, for the post-mortem as for the summary (the model
                    // gives it to the failure only when it came right after).
                    let answered = |p: &&mut Pending| {
                        p.process == step.process
                            && p.failure + 1 == step.model.failures.len()
                            && step.model.failures[p.failure].last_meminfo == Some((free, total))
                    };
                    if e.api == Api::ProbeMeminfo {
                        if let Some(p) = self.pending.last_mut().filter(answered) {
                            p.meminfo = Some(Meminfo {
                                free,
                                total,
                                traced,
                                time: step.time,
                            });
                        }
                    }
                    self.meminfo[step.process] = Some(Meminfo {
                        free,
                        total,
                        traced,
                        time: step.time,
                    });
                }
            }
            // Only failures the model kept with their state (the first KEPT_FAILURES).
            Op::Alloc | Op::Create
                if !e.ok()
                    && step.model.failures.len() as u64 == step.model.counts.failed_allocations =>
            {
                let others = run_device()
                    .map(|i| groups::per_process(&step.devices.devices[i].1.groups))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(p, _)| *p != step.process)
                    .collect();
                self.pending.push(Pending {
                    process: step.process,
                    failure: step.model.failures.len() - 1,
                    time: step.time,
                    others,
                    meminfo: self.meminfo[step.process],
                });
            }
            _ => {}
        }
    }

    pub fn finish(self, run: &Run) -> OomView {
        let failures = self
            .pending
            .into_iter()
            .map(|p| postmortem(run, p, self.layer))
            .collect();
        OomView {
            format: "vramtrace-oom",
            version: super::JSON_VERSION,
            start_unix_ns: run.start_unix_ns,
            failures,
        }
    }
}

#[derive(Serialize)]
pub struct OomView {
    pub format: &'static str,
    pub version: u32,
    pub start_unix_ns: u64,
    pub failures: Vec<Postmortem>,
}

#[derive(Serialize)]
pub struct Postmortem {
    /// The layer the post-mortem answers at: `allocated` where the tensors at the failure
    /// are known (and `--layer reserved` was not asked), else `reserved`. Both layers'
    /// figures are here whatever it is; the text lists this one first.
    pub layer: &'static str,
    /// Whether the text lists the other layer after it (no `--layer` given).
    #[serde(skip)]
    pub both_layers: bool,
    pub pid: u32,
    pub rank: Option<String>,
    pub time_ns: u64,
    pub api: &'static str,
    /// Where the memory asked for lives when it is not device memory (`host`,
    /// `host_numa`, `host_numa_current`, `managed`); absent for device memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<&'static str>,
    pub device: i32,
    pub host: String,
    pub gpu: String,
    pub requested_bytes: u64,
    pub result: i32,
    pub result_name: String,
    /// Who asked: the failing call's frames that matter, innermost first.
    pub frames: Vec<super::stacks::ShownFrame>,
    /// Device memory this process held on that device when the call failed.
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// This process's peak on the device before the failure.
    pub peak_before_bytes: u64,
    /// What this process held there, by group, largest first (at most 100 of them).
    pub live_groups: Vec<Group>,
    /// The live tensors (the allocated layer) at the failure, by who asked for them, in
    /// requested bytes; empty where no allocator or snapshot tells them.
    pub tensor_groups: Vec<Group>,
    /// Their requested bytes summed; null where tensors are not known.
    pub tensor_bytes: Option<u64>,
    /// What those tensors were for (summing to `tensor_bytes`); null where not known.
    pub tensor_categories: Option<super::categories::Categories>,
    /// What its device memory was for (summing to `live_bytes`), where a program without
    /// tensors named its allocations' categories with ranges; null otherwise.
    pub reserved_categories: Option<super::categories::Categories>,
    /// The whole of its memory there at the failure, in one split (as summary's
    /// `split_at_peak`); null where nothing of it is known but its total.
    pub split: Option<super::device_split::DeviceSplit>,
    /// The device layer: this process's memory on the device by NVML's last sample before
    /// the failure (CUDA context included); null without samples.
    pub device_bytes: Option<u64>,
    /// How many groups it held there, all of them.
    pub live_group_count: u64,
    /// Other traced processes on the same GPU.
    pub other_processes: Vec<OtherProcess>,
    pub other_processes_bytes: u64,
    /// The driver's figure at the failure, by the rule every view uses
    /// ([`crate::model::DriverFigure`]): vramtrace's question right after it, else PyTorch's
    /// figure at it, else the program's last answer before it; null without any.
    pub driver_free_bytes: Option<u64>,
    pub driver_total_bytes: Option<u64>,
    pub driver_report_time_ns: Option<u64>,
    /// Which of the three it is: `probe`, `pytorch` or `last_answer`.
    pub driver_figure: Option<DriverSource>,
    /// Memory the driver counted as used but no traced allocation explains (contexts,
    /// libraries, other programs), from that answer.
    pub untraced_bytes: Option<u64>,
    /// What should have been free at the failure by these figures.
    pub estimated_free_bytes: Option<u64>,
    /// The allocator's cache at the failure, where it annotated its blocks.
    pub allocator: Option<crate::model::AllocatorState>,
    pub verdict: Verdict,
    /// The verdict in one sentence.
    pub explanation: String,
    pub advice: Vec<String>,
    /// For a snapshot's `oom` entry: which common allocator settings a replay says would
    /// have avoided it (docs/json.md); absent for traces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avoided_by: Option<serde_json::Value>,
    /// The events just before the failure, oldest first: `[time_ns, api, result, size]`.
    pub recent_events: Vec<RecentEvent>,
}

#[derive(Serialize)]
pub struct OtherProcess {
    pub pid: u32,
    pub bytes: u64,
}

#[derive(Serialize)]
pub struct RecentEvent {
    pub time_ns: u64,
    pub api: &'static str,
    pub result: i32,
    pub size: u64,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The request alone is more than the device has.
    NeverFits,
    /// Even with everything this process held freed, it would not have fit: the memory
    /// was held by other processes or by things vramtrace does not see.
    HeldElsewhere,
    /// This process's own allocations took the room.
    HeldByThisProcess,
    /// By the figures it should have fit: fragmentation, or memory taken since the
    /// driver's last answer by something vramtrace does not see.
    ShouldHaveFit,
    /// The program never asked the driver for free memory, so the capacity is unknown.
    CapacityUnknown,
    /// The allocator's cache held enough free bytes, but in pieces smaller than the
    /// request (from its annotations).
    Fragmentation,
    /// The request was for host or managed pool memory (a failed `cuMemHostAlloc`, an
    /// allocation from a host or managed pool): the device's figures do not explain it.
    NotDeviceMemory,
}

/// The figures a verdict is made from.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub requested: u64,
    pub own: u64,
    pub others: u64,
    /// (free, total, traced bytes on the GPU when the driver said so)
    pub driver: Option<(u64, u64, u64)>,
    /// What the driver had free at the failure where it did not say of how much (a
    /// snapshot's `oom` entry), so that no verdict can be made from it.
    pub free_alone: Option<u64>,
}

/// (verdict, untraced bytes, estimated free bytes)
pub fn judge(f: Figures) -> (Verdict, Option<u64>, Option<u64>) {
    let Some((free, total, traced_then)) = f.driver else {
        return (Verdict::CapacityUnknown, None, None);
    };
    let untraced = total.saturating_sub(free).saturating_sub(traced_then);
    let estimated_free = total
        .saturating_sub(untraced)
        .saturating_sub(f.own)
        .saturating_sub(f.others);
    let verdict = if f.requested > total {
        Verdict::NeverFits
    } else if f.requested > total.saturating_sub(untraced + f.others) {
        Verdict::HeldElsewhere
    } else if f.requested <= estimated_free {
        Verdict::ShouldHaveFit
    } else {
        Verdict::HeldByThisProcess
    };
    (verdict, Some(untraced), Some(estimated_free))
}

fn postmortem(run: &Run, p: Pending, layer: Option<Layer>) -> Postmortem {
    let model = &run.processes[p.process];
    let f = &model.failures[p.failure];
    let others_bytes: u64 = p.others.iter().fold(0u64, |a, o| a.saturating_add(o.1));
    let live_groups = groups::of_process(model, &f.groups);
    let tensor_groups = groups::of_process(model, &f.tensors);
    let tensor_bytes = f.allocator.map(|_| {
        tensor_groups
            .iter()
            .fold(0u64, |a, g| a.saturating_add(g.bytes))
    });
    // The driver's figure by the one rule every view uses; what the traced processes held
    // when it was taken is the watch's where it was an answer the trace holds, else (PyTorch's
    // figure, taken at the failure) what they held at the failure.
    let figure = f.driver_at_failure();
    let at_failure = |d: DriverFigure| {
        d.total
            .map(|total| (d.free, total, f.reserved_on_device + others_bytes, p.time))
    };
    let driver = match (figure, p.meminfo) {
        (Some(d), _) if d.source == DriverSource::Pytorch => at_failure(d),
        (Some(_), Some(m)) => Some((m.free, m.total, m.traced, m.time)),
        (Some(d), None) => at_failure(d),
        (None, _) => None,
    };
    let figures = Figures {
        requested: f.requested,
        own: f.reserved_on_device,
        others: others_bytes,
        driver: driver.map(|(free, total, traced, _)| (free, total, traced)),
        free_alone: figure.filter(|d| d.total.is_none()).map(|d| d.free),
    };
    let location = f.event.loc.off_device(f.event.kind());
    let (mut verdict, untraced, estimated_free) = match location {
        Some(_) => (Verdict::NotDeviceMemory, None, None),
        None => judge(figures),
    };
    if let Some(a) = f.allocator.filter(|_| location.is_none()) {
        if verdict != Verdict::NeverFits
            && a.cached_free_bytes >= f.requested
            && a.largest_free_block_bytes < f.requested
        {
            verdict = Verdict::Fragmentation;
        }
    }
    let id = crate::replay::DeviceId::of(&model.header, f.event.dev);
    let explanation = match (verdict, f.allocator) {
        (Verdict::Fragmentation, Some(a)) => super::oom_words::fragmented(f.requested, &a),
        _ => super::oom_words::explain(verdict, &figures, untraced, &live_groups),
    };
    let expandable = model.expandable_segments == Some(true)
        || f.allocator.is_some_and(|a| a.expandable_segments);
    let advice = super::oom_words::advice(verdict, expandable);
    let shown = match (layer, tensor_bytes) {
        (Some(Layer::Reserved), _) | (_, None) => Layer::Reserved,
        _ => Layer::Allocated,
    };
    Postmortem {
        layer: shown.name(),
        both_layers: layer.is_none(),
        pid: model.header.pid,
        rank: model.rank().map(str::to_string),
        time_ns: p.time,
        api: f.event.api.name(),
        location: location.map(|l| l.name()),
        device: f.event.dev,
        host: id.host,
        gpu: id.gpu,
        requested_bytes: f.requested,
        result: f.event.res,
        result_name: errors::name(f.event.api, f.event.res),
        frames: super::stacks::shown(&model.stacks, f.event.stack),
        live_bytes: f.reserved_on_device,
        live_blocks: f.live_blocks,
        live_group_count: f.live_groups,
        peak_before_bytes: f.peak_before,
        live_groups,
        tensor_categories: super::categories::of_groups(model, &f.tensors)
            .filter(|_| tensor_bytes.is_some()),
        reserved_categories: match tensor_bytes {
            Some(_) => None,
            None => super::categories::of_reserved_at_failure(f),
        },
        split: super::device_split::at_failure(model, f),
        tensor_groups,
        tensor_bytes,
        device_bytes: f.device_used,
        other_processes: p
            .others
            .iter()
            .map(|&(i, bytes)| OtherProcess {
                pid: run.processes[i].header.pid,
                bytes,
            })
            .collect(),
        other_processes_bytes: others_bytes,
        driver_free_bytes: figure.map(|d| d.free),
        driver_total_bytes: figure.and_then(|d| d.total),
        driver_report_time_ns: driver.map(|d| d.3).or(figure.map(|_| p.time)),
        driver_figure: figure.map(|d| d.source),
        untraced_bytes: untraced,
        estimated_free_bytes: estimated_free,
        allocator: f.allocator,
        verdict,
        explanation,
        advice,
        avoided_by: None,
        recent_events: f.recent.iter().map(|e| recent(run, p.process, e)).collect(),
    }
}

fn recent(run: &Run, process: usize, e: &Event) -> RecentEvent {
    RecentEvent {
        time_ns: run.time_of(process, e.t),
        api: e.api.name(),
        result: e.res,
        size: e.size,
    }
}
