//! `check RUN --max-peak ...`: a run held against memory limits, for CI. Each limit is
//! checked on each GPU (or the one asked for); a broken one names the call site that held
//! the most when it broke, so that the failing job says where to look.

use super::gpu_figures::{per_gpu, GpuFigures};
use super::layer::{has_tensors, Layer};
use super::stacks::ShownFrame;
use crate::replay::Run;
use crate::units::bytes;
use serde::Serialize;

/// The layer a limit on the peak counts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckLayer {
    /// Tensors, requested bytes (the default where the run has them).
    Allocated,
    /// Device memory the program's allocators held from the driver.
    Reserved,
    /// The whole GPU as the driver counts it (where the run measured it).
    Device,
}

#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub max_peak: Option<u64>,
    pub layer: Option<CheckLayer>,
    pub max_leaked: Option<u64>,
    pub no_oom: bool,
    /// Only this GPU (its ordinal, as `GPU N` shows it).
    pub device: Option<String>,
    /// Most growth of the peak over the baseline's, in percent.
    pub max_growth_percent: Option<f64>,
    /// The run was replayed for this phase's peaks only (`check --phase`).
    pub phase: Option<String>,
}

#[derive(Serialize)]
pub struct CheckView {
    pub format: &'static str,
    pub version: u32,
    /// The layer of the peak limits.
    pub layer: CheckLayer,
    /// The phase the peaks are of (`--phase`); null: the whole run.
    pub phase: Option<String>,
    pub checks: Vec<Check>,
    /// How many checks broke their limit.
    pub broken: usize,
}

#[derive(Serialize)]
pub struct Check {
    /// `max_peak`, `max_leaked`, `no_oom` or `max_growth`.
    pub limit: &'static str,
    /// The GPU (`GPU N`); null for a limit on the whole run.
    pub gpu: Option<String>,
    pub broken: bool,
    /// What was measured and what it was held to, in bytes (for `max_growth`: percent;
    /// for `no_oom`: failed allocations and 0). Null where the run does not have it.
    pub measured: Option<f64>,
    pub allowed: f64,
    /// The call site that held the most when it broke (innermost frame outside operators).
    pub call_site: Option<String>,
    /// The one line of text.
    pub message: String,
}

/// The layer a run's peak is held at: the one asked for, else tensors where known.
fn layer_of(run: &Run, asked: Option<CheckLayer>) -> CheckLayer {
    match asked {
        Some(l) => l,
        None if has_tensors(run) => CheckLayer::Allocated,
        None => CheckLayer::Reserved,
    }
}

/// The groups' layer for a peak layer: the device layer has no groups of its own, so its
/// holders are the reserved layer's.
fn group_layer(l: CheckLayer, run: &Run) -> Layer {
    match l {
        CheckLayer::Allocated if has_tensors(run) => Layer::Allocated,
        _ => Layer::Reserved,
    }
}

fn layer_words(l: CheckLayer) -> &'static str {
    match l {
        CheckLayer::Allocated => "allocated layer: tensors",
        CheckLayer::Reserved => "reserved layer",
        CheckLayer::Device => "device layer: the driver's figure",
    }
}

/// The call site holding the most, with its bytes, from `(api, frames, bytes)` largest
/// first; where the most is held without a stack (a snapshot's tensors allocated before
/// its history), the largest with one is named after it, since that is code to look at.
fn top_site<'g>(
    mut held: impl Iterator<Item = (&'g str, &'g [ShownFrame], u64)>,
) -> Option<String> {
    let (api, frames, b) = held.next()?;
    let first = format!("{}: {}", super::stacks::site(api, frames), bytes(b));
    if !frames.is_empty() {
        return Some(first);
    }
    match held.find(|(_, f, _)| !f.is_empty()) {
        Some((api, frames, b)) => Some(format!(
            "{first}; then {}: {}",
            super::stacks::site(api, frames),
            bytes(b)
        )),
        None => Some(first),
    }
}

/// [`top_site`] of a GPU's groups at its peak, each call site's processes summed.
fn top_of(g: &GpuFigures) -> Option<String> {
    let mut by: std::collections::BTreeMap<(&str, String), (&str, &[ShownFrame], u64)> =
        Default::default();
    for x in &g.groups {
        let e = by
            .entry((x.api, serde_json::to_string(&x.frames).unwrap_or_default()))
            .or_insert((x.api, &x.frames[..], 0));
        e.2 = e.2.saturating_add(x.bytes);
    }
    let mut held: Vec<_> = by.into_values().collect();
    held.sort_by_key(|h| std::cmp::Reverse(h.2));
    top_site(held.into_iter())
}

/// A GPU's label, as every view shows it, for the device ordinal `dev` of process `p`.
fn gpu_of(p: &crate::model::ProcessModel, dev: i32) -> String {
    crate::replay::DeviceId::of(&p.header, dev).gpu
}

/// A limit on GPUs that no GPU of the run answers: broken, since it checked nothing.
fn no_gpu(limit: &'static str, allowed: f64, device: Option<&str>) -> Check {
    let which = device.map_or("no GPU".to_string(), |d| format!("no GPU {d}"));
    Check {
        limit,
        gpu: device.map(|d| format!("GPU {d}")),
        broken: true,
        measured: None,
        allowed,
        call_site: None,
        message: format!(
            "--{}: the run has {which}, so nothing was checked",
            limit.replace('_', "-")
        ),
    }
}

pub fn build(run: &Run, baseline: Option<&Run>, limits: &Limits) -> CheckView {
    let layer = layer_of(run, limits.layer);
    let gpus: Vec<GpuFigures> = per_gpu(run, group_layer(layer, run))
        .into_iter()
        .filter(|g| limits.device.as_ref().is_none_or(|d| &g.ordinal == d))
        .collect();
    let mut checks = Vec::new();
    let device = limits.device.as_deref();
    if let Some(max) = limits.max_peak {
        let within = limits.phase.as_deref().map(|p| format!(" in phase {p:?}"));
        for g in &gpus {
            checks.push(max_peak(g, layer, max, within.as_deref().unwrap_or("")));
        }
        match (&limits.phase, gpus.is_empty(), device) {
            // A phase of a run that has used no GPU yet (a test before the program's first
            // CUDA call) held no GPU memory: that is a measurement, 0 B.
            (Some(phase), true, None) => checks.push(Check {
                limit: "max_peak",
                gpu: None,
                broken: false,
                measured: Some(0.0),
                allowed: max as f64,
                call_site: None,
                message: format!(
                    "no GPU memory was held in phase {phase:?} (the run had used no GPU by the phase's end), within --max-peak {}",
                    bytes(max)
                ),
            }),
            (_, true, _) => checks.push(no_gpu("max_peak", max as f64, device)),
            _ => {}
        }
    }
    if let Some(max) = limits.max_leaked {
        checks.push(max_leaked(run, limits, max));
    }
    if limits.no_oom {
        checks.push(no_oom(run, limits));
    }
    if let (Some(base), Some(max)) = (baseline, limits.max_growth_percent) {
        // One diff for every GPU: it loads both runs' figures and groups.
        let diff = super::diff::build_at(base, run, group_layer(layer, run));
        for g in &gpus {
            checks.push(max_growth(&diff, g, layer, max));
        }
        if gpus.is_empty() {
            checks.push(no_gpu("max_growth", max, device));
        }
    }
    for (r, which) in [(Some(run), "the run"), (baseline, "the baseline")] {
        if r.is_some_and(|r| !r.complete()) {
            checks.push(Check {
                limit: "readable",
                gpu: None,
                broken: true,
                measured: None,
                allowed: 0.0,
                call_site: None,
                message: format!(
                    "{which} could not be read completely (what went wrong is on stderr): its figures may fall short"
                ),
            });
        }
    }
    CheckView {
        format: "vramtrace-check",
        version: super::JSON_VERSION,
        layer,
        phase: limits.phase.clone(),
        broken: checks.iter().filter(|c| c.broken).count(),
        checks,
    }
}

/// `within`: where the peak was taken, as words after its layer (` in phase "load"`), or "".
fn max_peak(g: &GpuFigures, layer: CheckLayer, max: u64, within: &str) -> Check {
    let words = layer_words(layer);
    let Some(peak) = peak_at_figures(&g.figures, layer) else {
        return Check {
            limit: "max_peak",
            gpu: Some(g.gpu.clone()),
            broken: true,
            measured: None,
            allowed: max as f64,
            call_site: None,
            message: format!(
                "{}: this run has no figure of the {words}, so --max-peak {} cannot be checked (choose another --layer)",
                g.gpu,
                bytes(max)
            ),
        };
    };
    let broken = peak > max;
    let call_site = broken.then(|| top_of(g)).flatten();
    let message = if broken {
        format!(
            "{}: peak {} ({words}){within} is over --max-peak {} by {}{}",
            g.gpu,
            bytes(peak),
            bytes(max),
            bytes(peak - max),
            call_site
                .as_ref()
                .map(|s| format!("; the most held by {s}"))
                .unwrap_or_default()
        )
    } else {
        format!(
            "{}: peak {} ({words}){within} is within --max-peak {}",
            g.gpu,
            bytes(peak),
            bytes(max)
        )
    };
    Check {
        limit: "max_peak",
        gpu: Some(g.gpu.clone()),
        broken,
        measured: Some(peak as f64),
        allowed: max as f64,
        call_site,
        message,
    }
}

fn max_leaked(run: &Run, limits: &Limits, max: u64) -> Check {
    let leaks = super::leaks::build(run);
    let summary = super::summary::build(run);
    let tensors = leaks.layer == "allocated";
    let groups = if tensors {
        &leaks.tensor_groups
    } else {
        &leaks.groups
    };
    // A leak is memory a process that exited normally never freed; what a killed process,
    // one that ended on its failed allocation or a snapshot still held is the state then
    // (as `summary` says: "not a leak").
    let exited = |g: &super::leaks::LeakGroup| {
        summary
            .processes
            .iter()
            .zip(&run.processes)
            .find(|(s, p)| s.pid == g.pid && s.host == g.host && p.header.pid == g.pid)
            .filter(|(s, _)| super::ending::Ending::of_process(s) == super::ending::Ending::Exited)
            .map(|(_, p)| gpu_of(p, g.device))
    };
    let mut held: Vec<_> = groups
        .iter()
        .filter(|g| tensors || g.device_memory())
        .filter_map(|g| exited(g).map(|gpu| (gpu, g)))
        .filter(|(gpu, _)| limits.device.as_ref().is_none_or(|d| d == gpu))
        .map(|(_, g)| g)
        .collect();
    let leaked = held.iter().fold(0u64, |a, g| a.saturating_add(g.bytes));
    let broken = leaked > max;
    held.sort_by_key(|x| std::cmp::Reverse(x.bytes));
    let call_site = broken
        .then(|| top_site(held.iter().map(|x| (x.api, &x.frames[..], x.bytes))))
        .flatten();
    let what = if tensors {
        "tensors never freed (allocated layer)"
    } else {
        "device memory never freed (reserved layer)"
    };
    let on = limits
        .device
        .as_ref()
        .map(|d| format!(" on GPU {d}"))
        .unwrap_or_default();
    let message = match broken {
        true => format!(
            "{} of {what}{on} by processes that exited is over --max-leaked {}{}",
            bytes(leaked),
            bytes(max),
            call_site
                .as_ref()
                .map(|s| format!("; the most from {s}"))
                .unwrap_or_default()
        ),
        false => format!(
            "{} of {what}{on} by processes that exited, within --max-leaked {}",
            bytes(leaked),
            bytes(max)
        ),
    };
    Check {
        limit: "max_leaked",
        gpu: limits.device.as_ref().map(|d| format!("GPU {d}")),
        broken,
        measured: Some(leaked as f64),
        allowed: max as f64,
        call_site,
        message,
    }
}

fn no_oom(run: &Run, limits: &Limits) -> Check {
    // Failed allocations of device memory, in time order, each with its process.
    let mut failed: Vec<_> = run
        .processes
        .iter()
        .flat_map(|p| p.failures.iter().map(move |f| (p, f)))
        .filter(|(_, f)| f.event.loc.off_device(f.event.kind()).is_none())
        .filter(|(p, f)| {
            let gpu = gpu_of(p, f.event.dev);
            limits.device.as_ref().is_none_or(|d| *d == gpu)
        })
        .collect();
    failed.sort_by_key(|(p, f)| (p.header.start_unix_ns.saturating_add(f.event.t), f.event.t));
    let broken = !failed.is_empty();
    let call_site = failed.first().map(|(p, f)| {
        let frames = super::stacks::shown(&p.stacks, f.event.stack);
        super::stacks::site(f.event.api.name(), &frames)
    });
    let message = match failed.first() {
        Some((p, f)) => format!(
            "{} of device memory (--no-oom): the first, {} on GPU {}, from {}",
            crate::units::count(failed.len() as u64, "failed allocation"),
            bytes(f.requested),
            gpu_of(p, f.event.dev),
            call_site.as_deref().unwrap_or("an unknown call site")
        ),
        None => "no allocation of device memory failed (--no-oom)".to_string(),
    };
    Check {
        limit: "no_oom",
        gpu: limits.device.as_ref().map(|d| format!("GPU {d}")),
        broken,
        measured: Some(failed.len() as f64),
        allowed: 0.0,
        call_site,
        message,
    }
}

fn max_growth(diff: &super::diff::DiffView, g: &GpuFigures, layer: CheckLayer, max: f64) -> Check {
    let d = diff.devices.iter().find(|d| d.gpu == g.gpu);
    let peaks =
        d.and_then(|d| Some((peak_at_figures(&d.a, layer)?, peak_at_figures(&d.b, layer)?)));
    let words = layer_words(layer);
    let Some((before, now)) = peaks else {
        return Check {
            limit: "max_growth",
            gpu: Some(g.gpu.clone()),
            broken: true,
            measured: None,
            allowed: max,
            call_site: None,
            message: format!(
                "{}: {} no peak of the {words} on this GPU, so --max-growth cannot be checked",
                g.gpu,
                match d {
                    None => "the baseline has",
                    Some(d) if peak_at_figures(&d.a, layer).is_none() => "the baseline has",
                    Some(_) => "this run has",
                }
            ),
        };
    };
    if before == 0 {
        // Growth from nothing has no percentage: any memory at all is past every limit.
        return Check {
            limit: "max_growth",
            gpu: Some(g.gpu.clone()),
            broken: now > 0,
            measured: None,
            allowed: max,
            call_site: None,
            message: format!(
                "{}: peak {} ({words}) against the baseline's 0 B: growth from nothing has no percentage, {} --max-growth {max}%",
                g.gpu,
                bytes(now),
                if now > 0 { "so it is over" } else { "so it is within" }
            ),
        };
    }
    let growth = (now as f64 - before as f64) * 100.0 / before as f64;
    let broken = now > before && growth > max;
    let call_site = broken
        .then(|| {
            let grown = d?.groups.iter().filter(|x| x.difference_bytes > 0);
            top_site(grown.map(|x| {
                (
                    x.api,
                    &x.frames[..],
                    x.difference_bytes.unsigned_abs() as u64,
                )
            }))
        })
        .flatten();
    let verb = if broken { "is over" } else { "is within" };
    let message = format!(
        "{}: peak {} ({words}) against the baseline's {}: {growth:+.1}%, {verb} --max-growth {max}%{}",
        g.gpu,
        bytes(now),
        bytes(before),
        call_site
            .as_ref()
            .map(|s| format!("; the most growth from {s}"))
            .unwrap_or_default()
    );
    Check {
        limit: "max_growth",
        gpu: Some(g.gpu.clone()),
        broken,
        measured: Some(growth),
        allowed: max,
        call_site,
        message,
    }
}

fn peak_at_figures(f: &super::gpu_figures::Figures, l: CheckLayer) -> Option<u64> {
    match l {
        CheckLayer::Allocated => f.peak_allocated_bytes,
        CheckLayer::Reserved => Some(f.peak_reserved_bytes),
        CheckLayer::Device => f.peak_device_bytes,
    }
}
