//! The live set at a bounded number of moments, so that a report answers "what was live
//! at t?" without the CLI. Moments start 1 us apart; whenever more than [`MOMENTS`] are
//! kept, their spacing doubles and every other one goes (memory: moments x devices x
//! [`TOP`] groups, never events). Each moment is the state right after the first event
//! of its slot, labelled with that event's time: exact at that time, not interpolated.

use super::groups::{self, Group};
use crate::model::{GroupBytes, Map};
use crate::replay::{DeviceId, Run, RunDevices, RunGroupKey, Step};
use serde::Serialize;

/// Most moments kept for a run.
pub const MOMENTS: usize = 200;
/// Groups kept per device and layer at a moment (the rest summed).
pub const TOP: usize = 10;

/// One device's largest groups at a moment: (group, bytes), and the totals.
#[derive(Clone, Default)]
struct Held {
    top: Vec<(RunGroupKey, GroupBytes)>,
    bytes: u64,
    blocks: u64,
    /// Groups live, kept or not: the page says how many it left out.
    groups: u64,
}

struct Taken {
    time: u64,
    /// By run device index: reserved memory, and tensors where the run has them.
    reserved: Vec<Held>,
    tensors: Vec<(usize, Held)>,
}

/// Fed with every step of a replay; [`MomentWatch::finish`] gives the moments.
pub struct MomentWatch {
    spacing: u64,
    next: u64,
    taken: Vec<Taken>,
}

impl Default for MomentWatch {
    fn default() -> Self {
        MomentWatch {
            spacing: 1_000,
            next: 0,
            taken: Vec::new(),
        }
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct Moment {
    pub time_ns: u64,
    /// Per run device (host, gpu): what was live.
    pub devices: Vec<MomentDevice>,
}

#[derive(Serialize, Clone, Debug)]
pub struct MomentDevice {
    pub host: String,
    pub gpu: String,
    /// `allocated` (tensors, requested bytes) or `reserved`.
    pub layer: &'static str,
    pub bytes: u64,
    pub blocks: u64,
    /// Groups live then, the [`TOP`] kept and the rest.
    pub group_count: u64,
    /// The largest groups, by process and call site.
    pub groups: Vec<Group>,
}

fn held(usage: &Map<RunGroupKey, GroupBytes>, reserved: u64) -> Held {
    let mut top: Vec<(RunGroupKey, GroupBytes)> = usage
        .iter()
        .filter(|(_, g)| g.blocks > 0)
        .map(|(k, g)| (*k, *g))
        .collect();
    let blocks = top.iter().map(|(_, g)| g.blocks).sum();
    let groups = top.len() as u64;
    let cut = TOP.min(top.len());
    if cut > 0 {
        top.select_nth_unstable_by(cut - 1, |a, b| b.1.bytes.cmp(&a.1.bytes));
    }
    top.truncate(cut);
    Held {
        top,
        bytes: reserved,
        blocks,
        groups,
    }
}

fn take(devices: &RunDevices) -> Vec<Held> {
    devices
        .devices
        .iter()
        .map(|(_, u)| held(&u.groups, u.reserved))
        .collect()
}

impl MomentWatch {
    pub fn step(&mut self, step: &Step) {
        if step.time < self.next {
            return;
        }
        let tensors = step
            .tensors
            .devices
            .iter()
            .filter_map(|(id, u)| {
                let i = step.devices.devices.iter().position(|(d, _)| d == id)?;
                Some((i, held(&u.groups, u.reserved)))
            })
            .collect();
        self.taken.push(Taken {
            time: step.time,
            reserved: take(step.devices),
            tensors,
        });
        while self.taken.len() > MOMENTS {
            self.spacing = self.spacing.saturating_mul(2);
            let spacing = self.spacing;
            let mut last = None;
            self.taken.retain(|t| {
                let slot = t.time / spacing;
                let keep = last != Some(slot);
                last = Some(slot);
                keep
            });
        }
        self.next = (step.time / self.spacing)
            .saturating_add(1)
            .saturating_mul(self.spacing);
    }

    /// The moments of the run devices `drawn` says are shown: a page draws a few dozen
    /// GPUs of a thousand-rank run, and each moment's groups name their frames.
    pub fn finish(self, run: &Run, drawn: impl Fn(&DeviceId) -> bool) -> Vec<Moment> {
        let shown: Vec<bool> = run
            .devices
            .devices
            .iter()
            .map(|(id, _)| drawn(id))
            .collect();
        let ordinals: Vec<Option<groups::OrdinalOf>> = (0..run.devices.devices.len())
            .map(|i| shown[i].then(|| groups::ordinals(run, i)))
            .collect();
        self.taken
            .into_iter()
            .map(|t| Moment {
                time_ns: t.time,
                devices: t
                    .reserved
                    .iter()
                    .enumerate()
                    .filter_map(|(i, reserved)| {
                        let ordinals = ordinals.get(i)?.as_ref()?;
                        let (layer, h) = match t.tensors.iter().find(|(d, _)| *d == i) {
                            Some((_, h)) => ("allocated", h),
                            None => ("reserved", reserved),
                        };
                        let id = &run.devices.devices[i].0;
                        let map: Map<RunGroupKey, GroupBytes> = h.top.iter().copied().collect();
                        Some(MomentDevice {
                            host: id.host.clone(),
                            gpu: id.gpu.clone(),
                            layer,
                            bytes: h.bytes,
                            blocks: h.blocks,
                            group_count: h.groups,
                            groups: groups::of_run(run, &map, ordinals),
                        })
                    })
                    .collect(),
            })
            .collect()
    }
}
