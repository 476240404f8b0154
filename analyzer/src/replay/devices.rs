//! The run's devices: processes that share a GPU are summed on the common clock.
//!
//! A device ordinal is per process: under `CUDA_VISIBLE_DEVICES=3`, device 0 of a rank is
//! GPU 3 of its host. So a run device is (host, the `CUDA_VISIBLE_DEVICES` entry for the
//! ordinal, or the ordinal itself when the variable is not set).

use crate::model::Map;
use crate::model::{Change, DeviceUsage, GroupKey};
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_schema::Header;

/// A physical GPU of the run.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DeviceId {
    pub host: String,
    /// `CUDA_VISIBLE_DEVICES` entry (an index or a UUID), or the ordinal.
    pub gpu: String,
}

impl DeviceId {
    pub fn of(header: &Header, ordinal: i32) -> DeviceId {
        let visible = header.env.get("CUDA_VISIBLE_DEVICES").and_then(|v| {
            usize::try_from(ordinal)
                .ok()
                .and_then(|i| v.split(',').nth(i))
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        });
        DeviceId {
            host: header.host.clone(),
            gpu: visible.unwrap_or_else(|| ordinal.to_string()),
        }
    }
}

/// `GPU 3`, or `node1 GPU 3` when the run spans hosts.
pub fn gpu_label(host: &str, gpu: &str, many_hosts: bool) -> String {
    if many_hosts {
        format!("{host} GPU {gpu}")
    } else {
        format!("GPU {gpu}")
    }
}

/// Groups of a run device: which process (index into [`crate::replay::Run::processes`]) and
/// which allocating group.
pub type RunGroupKey = (usize, GroupKey);

/// Device memory of every process of the run, per physical device, over the run's clock
/// (`peak_t` and the like are run times). `DeviceUsage::device` is the index in `devices`.
#[derive(Default)]
pub struct RunDevices {
    /// In the order first used.
    pub devices: Vec<(DeviceId, DeviceUsage<RunGroupKey>)>,
    /// (process, ordinal) -> index in `devices`, so the hot path allocates nothing.
    index: Map<(usize, i32), usize>,
    /// The last look-up of `index`: a process's events are nearly all on one device.
    last: Option<((usize, i32), usize)>,
}

impl RunDevices {
    /// The run device of `ordinal` in process `process`, added if new.
    pub fn index_of(&mut self, process: usize, header: &Header, ordinal: i32) -> usize {
        if let Some((_, i)) = self.last.filter(|(key, _)| *key == (process, ordinal)) {
            return i;
        }
        if let Some(&i) = self.index.get(&(process, ordinal)) {
            self.last = Some(((process, ordinal), i));
            return i;
        }
        let id = DeviceId::of(header, ordinal);
        let i = match self.devices.iter().position(|(d, _)| *d == id) {
            Some(i) => i,
            None => {
                self.devices
                    .push((id, DeviceUsage::new(self.devices.len() as i32)));
                self.devices.len() - 1
            }
        };
        self.index.insert((process, ordinal), i);
        i
    }

    /// Applies what one event of process `index` changed, at run time `t`.
    pub fn apply(&mut self, process: usize, header: &Header, t: u64, changes: &[Change]) {
        for c in changes {
            let i = self.index_of(process, header, c.dev);
            let usage = &mut self.devices[i].1;
            if c.added {
                usage.add(t, (process, c.key), c.bytes);
            } else {
                usage.remove((process, c.key), c.bytes);
            }
        }
    }

    /// Takes everything process `process` holds (`held`: its own per-ordinal usage, of
    /// device memory or of tensors) out of the run's totals, on every device or on run
    /// device `only`: the process ended, and its memory with it (its own model keeps it,
    /// as what it never freed). Returns what was given back.
    pub fn release(
        &mut self,
        process: usize,
        held: &BTreeMap<i32, DeviceUsage>,
        only: Option<usize>,
    ) -> Vec<Change> {
        let mut out = Vec::new();
        for (&ordinal, own) in held {
            let Some(i) = self
                .lookup(process, ordinal)
                .filter(|&i| only.is_none_or(|o| o == i))
            else {
                continue;
            };
            let usage = &mut self.devices[i].1;
            for (&key, &held) in &own.groups {
                if usage
                    .groups
                    .get(&(process, key))
                    .is_none_or(|g| g.blocks == 0)
                {
                    continue;
                }
                usage.remove_blocks((process, key), held);
                out.push(Change {
                    dev: ordinal,
                    key,
                    bytes: held.bytes,
                    added: false,
                });
            }
        }
        out
    }

    /// The run device of a process's ordinal, if it ever held memory.
    pub fn lookup(&self, process: usize, ordinal: i32) -> Option<usize> {
        self.index.get(&(process, ordinal)).copied()
    }

    /// Devices sorted by id, for output.
    pub fn sorted(&self) -> Vec<&(DeviceId, DeviceUsage<RunGroupKey>)> {
        let mut v: Vec<_> = self.devices.iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The peaks count from run time `t`: what each device holds now is its peak so far.
    pub fn restart_peaks(&mut self, t: u64) {
        for (_, d) in &mut self.devices {
            d.restart_peak(t);
        }
    }

    pub fn finish(&mut self) {
        for (_, d) in &mut self.devices {
            d.settle_peak();
        }
    }
}
