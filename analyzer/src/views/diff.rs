//! `diff A B`: two runs side by side, device by device: peak and end by layer, and who
//! made the difference - the groups holding each run's peak, matched between the runs by
//! their frames (never by address, which differs from run to run), largest change first.

use super::gpu_figures::{per_gpu, Figures, GpuFigures};
use super::groups::Group;
use super::layer::{has_tensors, Layer};
use super::phase_peaks::PhasePeaks;
use crate::replay::Run;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
pub struct DiffView {
    pub format: &'static str,
    pub version: u32,
    /// The layer the groups are compared at: `allocated` (tensors, requested bytes) where
    /// both runs have them, else `reserved`.
    pub layer: &'static str,
    pub devices: Vec<DeviceDiff>,
    /// GPUs (their labels) that only one of the runs used.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Phase by phase (`vramtrace.phase`), where either run has phases: the peak inside
    /// each, at `layer`, summed over each process's devices.
    pub phases: Vec<super::diff_phases::PhaseDiff>,
    /// Markers past the first 10,000 of a run, not kept: phases they close are missing.
    pub markers_not_kept: u64,
}

#[derive(Serialize)]
pub struct DeviceDiff {
    /// `GPU N`; where a run spans hosts, `rank R GPU N` (its one process's rank), else
    /// `HOST GPU N`.
    pub gpu: String,
    /// The layer of its groups and `peak_bytes`: the run's `layer`, or `reserved` where
    /// either run has no tensors on this GPU (the two are never compared across layers).
    pub layer: &'static str,
    pub a: Figures,
    pub b: Figures,
    /// B minus A, for each figure both runs have.
    pub difference: Differences,
    /// Every group holding either run's peak (at `layer`), largest change first.
    pub groups: Vec<GroupDiff>,
    /// What the tensors at each run's peak were for, category by category in their
    /// order, where both runs' are known (docs/json.md, "Tensor categories"); empty
    /// otherwise.
    pub categories: Vec<CategoryDiff>,
}

#[derive(Serialize)]
pub struct CategoryDiff {
    pub category: crate::model::Category,
    pub a_bytes: u64,
    pub b_bytes: u64,
    pub difference_bytes: i128,
}

#[derive(Serialize, Default)]
pub struct Differences {
    pub peak_reserved_bytes: i128,
    pub reserved_bytes_at_end: i128,
    pub peak_allocated_bytes: Option<i128>,
    pub peak_device_bytes: Option<i128>,
    pub peak_bytes: i128,
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Grown,
    Shrunk,
    New,
    Gone,
    Same,
}

#[derive(Serialize)]
pub struct GroupDiff {
    pub change: Change,
    pub api: &'static str,
    pub frames: Vec<super::stacks::ShownFrame>,
    pub a_bytes: u64,
    pub b_bytes: u64,
    pub difference_bytes: i128,
    pub a_blocks: u64,
    pub b_blocks: u64,
}

impl GroupDiff {
    /// Who allocated, for one line of text.
    pub fn who(&self) -> String {
        super::stacks::who(self.api, &self.frames)
    }

    /// The innermost frame that is not an operator (for PyTorch, the user's own line).
    pub fn site(&self) -> String {
        super::stacks::site(self.api, &self.frames)
    }
}

/// The layer both runs can be compared at.
pub fn common_layer(a: &Run, b: &Run) -> Layer {
    if has_tensors(a) && has_tensors(b) {
        Layer::Allocated
    } else {
        Layer::Reserved
    }
}

/// The diff at the layer both runs have, with their phases (from a [`PhaseWatch`] of each
/// replay) compared.
///
/// [`PhaseWatch`]: super::phase_peaks::PhaseWatch
pub fn build(a: &Run, b: &Run, phases: (&PhasePeaks, &PhasePeaks)) -> DiffView {
    let mut view = build_at(a, b, common_layer(a, b));
    view.phases = super::diff_phases::compare(phases.0, phases.1, view.layer);
    view.markers_not_kept = phases.0.markers_not_kept + phases.1.markers_not_kept;
    view
}

/// The diff with the groups and `peak_bytes` at `layer`.
pub fn build_at(a: &Run, b: &Run, layer: Layer) -> DiffView {
    let gpus_a = per_gpu(a, layer);
    let gpus_b = per_gpu(b, layer);
    // Reserved figures for the GPUs where only one run has tensors, made once if needed.
    let mut reserved: Option<(Vec<GpuFigures>, Vec<GpuFigures>)> = None;
    let mut devices = Vec::new();
    for ga in &gpus_a {
        let Some(gb) = gpus_b.iter().find(|g| g.gpu == ga.gpu) else {
            continue;
        };
        let (ga, gb) = if ga.layer == gb.layer {
            (ga, gb)
        } else {
            let (ra, rb) = reserved
                .get_or_insert_with(|| (per_gpu(a, Layer::Reserved), per_gpu(b, Layer::Reserved)));
            match (
                ra.iter().find(|g| g.gpu == ga.gpu),
                rb.iter().find(|g| g.gpu == ga.gpu),
            ) {
                (Some(x), Some(y)) => (x, y),
                _ => continue,
            }
        };
        devices.push(DeviceDiff {
            gpu: ga.gpu.clone(),
            layer: ga.layer,
            difference: differences(&ga.figures, &gb.figures),
            a: ga.figures,
            b: gb.figures,
            groups: group_diffs(&ga.groups, &gb.groups),
            categories: category_diffs(ga.categories.as_ref(), gb.categories.as_ref()),
        });
    }
    let only = |x: &[GpuFigures], y: &[GpuFigures]| -> Vec<String> {
        x.iter()
            .filter(|g| !y.iter().any(|o| o.gpu == g.gpu))
            .map(|g| g.gpu.clone())
            .collect()
    };
    DiffView {
        format: "vramtrace-diff",
        version: super::JSON_VERSION,
        layer: layer.name(),
        only_in_a: only(&gpus_a, &gpus_b),
        only_in_b: only(&gpus_b, &gpus_a),
        devices,
        phases: Vec::new(),
        markers_not_kept: 0,
    }
}

/// Each category's bytes in A and B, where both are known.
fn category_diffs(
    a: Option<&super::categories::Categories>,
    b: Option<&super::categories::Categories>,
) -> Vec<CategoryDiff> {
    let (Some(a), Some(b)) = (a, b) else {
        return Vec::new();
    };
    a.split
        .iter()
        .zip(&b.split)
        .map(|(x, y)| CategoryDiff {
            category: x.category,
            a_bytes: x.bytes,
            b_bytes: y.bytes,
            difference_bytes: minus(y.bytes, x.bytes),
        })
        .collect()
}

fn minus(b: u64, a: u64) -> i128 {
    i128::from(b) - i128::from(a)
}

fn differences(a: &Figures, b: &Figures) -> Differences {
    let both = |x: Option<u64>, y: Option<u64>| Some(minus(y?, x?));
    Differences {
        peak_reserved_bytes: minus(b.peak_reserved_bytes, a.peak_reserved_bytes),
        reserved_bytes_at_end: minus(b.reserved_bytes_at_end, a.reserved_bytes_at_end),
        peak_allocated_bytes: both(a.peak_allocated_bytes, b.peak_allocated_bytes),
        peak_device_bytes: both(a.peak_device_bytes, b.peak_device_bytes),
        peak_bytes: minus(b.peak_bytes, a.peak_bytes),
    }
}

/// A group's identity across runs: what allocated and from where, whatever the process
/// and address.
fn identity(api: &str, frames: &[super::stacks::ShownFrame]) -> (String, String) {
    // The frames' own fields, not their folded text, where `f;g` and `f:g` are one.
    let frames = serde_json::to_string(frames).unwrap_or_default();
    (api.to_string(), frames)
}

/// The groups of both peaks matched by frames (each run's processes summed), largest
/// change first, then largest, then by frames, so that the order is the same every time.
fn group_diffs(a: &[Group], b: &[Group]) -> Vec<GroupDiff> {
    let mut by: BTreeMap<(String, String), GroupDiff> = BTreeMap::new();
    for (side, groups) in [(0, a), (1, b)] {
        for g in groups {
            let d = by
                .entry(identity(g.api, &g.frames))
                .or_insert_with(|| GroupDiff {
                    change: Change::Same,
                    api: g.api,
                    frames: g.frames.clone(),
                    a_bytes: 0,
                    b_bytes: 0,
                    difference_bytes: 0,
                    a_blocks: 0,
                    b_blocks: 0,
                });
            if side == 0 {
                d.a_bytes = d.a_bytes.saturating_add(g.bytes);
                d.a_blocks += g.blocks;
            } else {
                d.b_bytes = d.b_bytes.saturating_add(g.bytes);
                d.b_blocks += g.blocks;
            }
        }
    }
    let mut out: Vec<GroupDiff> = by
        .into_values()
        .map(|mut d| {
            d.difference_bytes = minus(d.b_bytes, d.a_bytes);
            d.change = match (d.a_blocks, d.b_blocks) {
                (0, _) => Change::New,
                (_, 0) => Change::Gone,
                _ if d.b_bytes > d.a_bytes => Change::Grown,
                _ if d.b_bytes < d.a_bytes => Change::Shrunk,
                _ => Change::Same,
            };
            d
        })
        .collect();
    out.sort_by(|x, y| {
        y.difference_bytes
            .abs()
            .cmp(&x.difference_bytes.abs())
            .then_with(|| y.b_bytes.max(y.a_bytes).cmp(&x.b_bytes.max(x.a_bytes)))
            .then_with(|| identity(x.api, &x.frames).cmp(&identity(y.api, &y.frames)))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(api: &'static str, frame: &str, bytes: u64, blocks: u64) -> Group {
        Group {
            pid: Some(1),
            device: Some(0),
            api,
            stack: 7,
            bytes,
            blocks,
            frames: vec![super::super::stacks::ShownFrame {
                function: Some(frame.into()),
                file: Some("model.py".into()),
                line: Some(40),
                module: "python".into(),
                inlined: false,
                text: format!("{frame} (model.py:40)"),
            }],
            category: None,
            label: None,
            labels_differ: false,
        }
    }

    #[test]
    fn groups_match_by_frames_and_each_change_is_named() {
        let a = [
            group("cudaMalloc", "forward", 100, 1),
            group("cudaMalloc", "backward", 50, 2),
            group("cudaMalloc", "step", 10, 1),
        ];
        let b = [
            group("cudaMalloc", "forward", 300, 2),
            group("cudaMalloc", "backward", 20, 1),
            group("cudaMalloc", "load", 5, 1),
            group("cudaMalloc", "step", 10, 1),
        ];
        let d = group_diffs(&a, &b);
        let got: Vec<(Change, i128)> = d.iter().map(|g| (g.change, g.difference_bytes)).collect();
        assert_eq!(
            got,
            [
                (Change::Grown, 200),
                (Change::Shrunk, -30),
                (Change::New, 5),
                (Change::Same, 0),
            ]
        );
        assert_eq!(d[0].site(), "forward (model.py:40)");
        let gone = group_diffs(&a[..1], &[]);
        assert_eq!(gone[0].change, Change::Gone);
        assert_eq!(gone[0].difference_bytes, -100);
    }
}
