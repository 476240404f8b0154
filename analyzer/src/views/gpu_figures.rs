//! A run's figures per GPU, each naming its layer and moment, with the groups holding its
//! peak at one layer: what `diff` compares and `check` holds against limits.

use super::groups::Group;
use super::layer::Layer;
use super::peak;
use super::summary;
use crate::replay::Run;
use serde::Serialize;

/// One run's figures on one GPU.
#[derive(Serialize, Clone, Copy, Default, Debug)]
pub struct Figures {
    /// The reserved layer (device memory from the driver) at its peak, and at the run's
    /// end (what its processes held then: exited ones hold nothing; a snapshot's, when it
    /// was taken).
    pub peak_reserved_bytes: u64,
    pub reserved_bytes_at_end: u64,
    /// The allocated layer (tensors, requested bytes) at its peak; null without tensors.
    pub peak_allocated_bytes: Option<u64>,
    /// The device layer (the driver's whole-GPU figure) at its most, where it was taken.
    pub peak_device_bytes: Option<u64>,
    /// Bytes at the peak of the layer asked for: the groups' sum.
    pub peak_bytes: u64,
}

pub struct GpuFigures {
    /// `GPU N`, or `HOST GPU N` where the run spans hosts (one machine's `GPU 0` is then
    /// compared with another run's `GPU 0`, whatever their hosts).
    pub gpu: String,
    /// The GPU's own label in the run (`0`).
    pub ordinal: String,
    /// The layer its groups and `peak_bytes` are at: the one asked for, or `reserved`
    /// where this GPU has no tensors.
    pub layer: &'static str,
    pub figures: Figures,
    /// The groups holding the peak of `layer`, largest first.
    pub groups: Vec<Group>,
    /// What the tensors at the peak were for, at the allocated layer, where known.
    pub categories: Option<super::categories::Categories>,
}

/// Each GPU of `run`, its groups at the peak of `layer`.
pub fn per_gpu(run: &Run, layer: Layer) -> Vec<GpuFigures> {
    let s = summary::build(run);
    let peaks = peak::build(run, None, Some(layer));
    let hosts: std::collections::BTreeSet<&str> =
        s.devices.iter().map(|d| d.host.as_str()).collect();
    s.devices
        .iter()
        .map(|d| {
            let p = peaks
                .devices
                .iter()
                .find(|p| p.host == d.host && p.gpu == d.gpu);
            // The device layer is the whole GPU's: the most any of its processes saw.
            let peak_device_bytes = s
                .processes
                .iter()
                .filter(|p| p.host == d.host)
                .flat_map(|p| &p.devices)
                .filter(|pd| pd.gpu == d.gpu)
                .filter_map(|pd| pd.peak_device_bytes)
                .max();
            // Across hosts (a directory of per-rank snapshots is one host a file), a GPU
            // is named by the rank of its one process where it has one, so that rank 3's
            // GPU 0 meets rank 3's GPU 0 of another run whatever their hosts and files.
            let ranks: Vec<&str> = s
                .processes
                .iter()
                .filter(|p| p.host == d.host && p.devices.iter().any(|pd| pd.gpu == d.gpu))
                .map(|p| p.rank.as_deref())
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default();
            let gpu = match ranks.as_slice() {
                [rank] if hosts.len() > 1 => format!("rank {rank} GPU {}", d.gpu),
                _ => crate::replay::devices::gpu_label(&d.host, &d.gpu, hosts.len() > 1),
            };
            GpuFigures {
                gpu,
                layer: p.map_or(Layer::Reserved.name(), |p| p.layer),
                ordinal: d.gpu.clone(),
                figures: Figures {
                    peak_reserved_bytes: d.peak_reserved_bytes,
                    reserved_bytes_at_end: d.reserved_bytes_at_end,
                    peak_allocated_bytes: d.peak_requested_bytes,
                    peak_device_bytes,
                    peak_bytes: p.map_or(0, |p| p.live_bytes),
                },
                groups: p.map(|p| p.groups.clone()).unwrap_or_default(),
                categories: p.and_then(|p| p.categories.clone()),
            }
        })
        .collect()
}
