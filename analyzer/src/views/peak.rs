//! `peak` / `top`: the live set of each device at the run's peak on it, or at a chosen
//! moment (the run replayed up to it), grouped by process and allocating group: tensors
//! (the allocated layer) where an allocator or a snapshot tells them, reserved memory
//! otherwise.

use super::groups::{self, Group};
use crate::model::{DeviceUsage, GroupBytes};
use crate::replay::{Run, RunGroupKey};
use serde::Serialize;

pub use super::layer::Layer;

#[derive(Serialize)]
pub struct PeakView {
    pub format: &'static str,
    pub version: u32,
    pub start_unix_ns: u64,
    /// The moment asked for (`--at`), or null: each device at its own peak.
    pub at_ns: Option<u64>,
    pub devices: Vec<PeakDevice>,
}

#[derive(Serialize)]
pub struct PeakDevice {
    pub host: String,
    pub gpu: String,
    /// `allocated` (tensors, in requested bytes) or `reserved`.
    pub layer: &'static str,
    /// When this live set was held (the peak's time, or `at_ns`).
    pub time_ns: u64,
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Bytes per process, largest first.
    pub processes: Vec<ProcessBytes>,
    pub groups: Vec<Group>,
    /// What the tensors were for, at the allocated layer (docs/json.md, "Tensor
    /// categories"); null at the reserved layer and where not known.
    pub categories: Option<super::categories::Categories>,
    /// The live set by PyTorch's labels of its tensors (`user_metadata`, private pool),
    /// largest first, the unlabelled as `label: null`; empty where no tensor has one.
    pub labels: Vec<LabelBytes>,
    /// The function holding the most of it, its groups summed: the innermost frame of
    /// each group that is not an operator (for PyTorch, the user's own code).
    pub top_function: Option<FunctionBytes>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct FunctionBytes {
    pub function: String,
    pub file: Option<String>,
    pub bytes: u64,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct LabelBytes {
    pub label: Option<crate::model::Label>,
    pub bytes: u64,
    pub blocks: u64,
}

#[derive(Serialize)]
pub struct ProcessBytes {
    pub pid: u32,
    pub rank: Option<String>,
    pub bytes: u64,
}

/// `at`: the run was loaded with `until = at`, so its current state is the state then.
/// `layer`: the one asked for; by default tensors where the run has them.
pub fn build(run: &Run, at: Option<u64>, layer: Option<Layer>) -> PeakView {
    let mut devices: Vec<PeakDevice> = run
        .devices
        .devices
        .iter()
        .enumerate()
        .map(|(index, (id, usage))| {
            let tensors = (layer != Some(Layer::Reserved))
                .then(|| run.tensors.devices.iter().find(|(t, _)| t == id))
                .flatten()
                .map(|(_, u)| u);
            let (usage, shown): (&DeviceUsage<RunGroupKey>, Layer) = match tensors {
                Some(t) => (t, Layer::Allocated),
                None => (usage, Layer::Reserved),
            };
            let at_peak = at.is_none();
            let map = if at_peak {
                &usage.peak_groups
            } else {
                &usage.groups
            };
            let groups = groups::run_device_groups(run, index, usage, at_peak);
            let categories = (shown == Layer::Allocated)
                .then(|| super::categories::of_run_groups(run, map))
                .flatten();
            PeakDevice {
                host: id.host.clone(),
                gpu: id.gpu.clone(),
                layer: shown.name(),
                time_ns: at.unwrap_or(usage.peak_t),
                live_bytes: groups.iter().fold(0u64, |a, g| a.saturating_add(g.bytes)),
                live_blocks: groups.iter().map(|g| g.blocks).sum(),
                processes: groups::per_process(map)
                    .into_iter()
                    .map(|(p, bytes)| ProcessBytes {
                        pid: run.processes[p].header.pid,
                        rank: run.processes[p].rank().map(str::to_string),
                        bytes,
                    })
                    .collect(),
                top_function: top_function(&groups),
                labels: labels(run, map),
                categories,
                groups,
            }
        })
        .collect();
    devices.sort_by(|a, b| (&a.host, &a.gpu).cmp(&(&b.host, &b.gpu)));
    PeakView {
        format: "vramtrace-peak",
        version: super::JSON_VERSION,
        start_unix_ns: run.start_unix_ns,
        at_ns: at,
        devices,
    }
}

/// The live set `map` summed by its stacks' labels, largest first; empty where none has a
/// label.
fn labels(run: &Run, map: &crate::model::Map<RunGroupKey, GroupBytes>) -> Vec<LabelBytes> {
    let label = |(p, k): &RunGroupKey| run.processes[*p].categories.labels.get(&k.stack);
    if map.iter().all(|(k, g)| g.blocks == 0 || label(k).is_none()) {
        return Vec::new();
    }
    let mut by: std::collections::BTreeMap<Option<&crate::model::Label>, (u64, u64)> =
        Default::default();
    for (k, g) in map.iter().filter(|(_, g)| g.blocks > 0) {
        let b = by.entry(label(k)).or_default();
        b.0 = b.0.saturating_add(g.bytes);
        b.1 = b.1.saturating_add(g.blocks);
    }
    let mut out: Vec<LabelBytes> = by
        .into_iter()
        .map(|(label, (bytes, blocks))| LabelBytes {
            label: label.cloned(),
            bytes,
            blocks,
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.label.cmp(&b.label)));
    out
}

/// The function holding the most bytes of `groups`, summed over its groups.
fn top_function(groups: &[Group]) -> Option<FunctionBytes> {
    let mut by: std::collections::BTreeMap<(String, Option<String>), u64> = Default::default();
    for g in groups {
        if let Some(f) = g.frames.iter().find(|f| f.module != "operator") {
            let function = f.function.clone().unwrap_or_else(|| f.module.clone());
            let b = by.entry((function, f.file.clone())).or_default();
            *b = b.saturating_add(g.bytes);
        }
    }
    by.into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|((function, file), bytes)| FunctionBytes {
            function,
            file,
            bytes,
        })
}
