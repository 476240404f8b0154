//! `peak` / `top`: the live set of each device at the run's peak on it, or at a chosen
//! moment (the run replayed up to it), grouped by process and allocating group.

use super::groups::{self, Group};
use crate::run::Run;
use serde::Serialize;

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
    /// When this live set was held (the peak's time, or `at_ns`).
    pub time_ns: u64,
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Bytes per process, largest first.
    pub processes: Vec<ProcessBytes>,
    pub groups: Vec<Group>,
}

#[derive(Serialize)]
pub struct ProcessBytes {
    pub pid: u32,
    pub rank: Option<String>,
    pub bytes: u64,
}

/// `at`: the run was loaded with `until = at`, so its current state is the state then.
pub fn build(run: &Run, at: Option<u64>) -> PeakView {
    let mut devices: Vec<PeakDevice> = run
        .devices
        .devices
        .iter()
        .enumerate()
        .map(|(index, (id, usage))| {
            let at_peak = at.is_none();
            let map = if at_peak {
                &usage.peak_groups
            } else {
                &usage.groups
            };
            let groups = groups::run_device_groups(run, index, usage, at_peak);
            PeakDevice {
                host: id.host.clone(),
                gpu: id.gpu.clone(),
                time_ns: at.unwrap_or(usage.peak_t),
                live_bytes: groups.iter().map(|g| g.bytes).sum(),
                live_blocks: groups.iter().map(|g| g.blocks).sum(),
                processes: groups::per_process(map)
                    .into_iter()
                    .map(|(p, bytes)| ProcessBytes {
                        pid: run.processes[p].header.pid,
                        rank: run.processes[p].rank().map(str::to_string),
                        bytes,
                    })
                    .collect(),
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
