//! `leaks`: memory never freed, grouped by process, device and allocating group. In a
//! trace without an end line (a killed process) it is what was live when it stopped.

use super::layer::Layer;
use super::stacks::{self, ShownFrame};
use crate::model::Block;
use crate::model::Map;
use crate::replay::Run;
use serde::Serialize;
use vramtrace_schema::Kind;

#[derive(Serialize)]
pub struct Leaks {
    pub format: &'static str,
    pub version: u32,
    pub start_unix_ns: u64,
    /// The layer the view answers at (`allocated` where the run has tensors, or as
    /// `--layer` asked): the text lists it first, `flamegraph --leaks` draws it. Both
    /// layers' figures are here whatever it is.
    pub layer: &'static str,
    /// Whether the text lists the other layer after it (no `--layer` given).
    #[serde(skip)]
    pub both_layers: bool,
    /// The reserved layer: device memory never freed (pinned host memory and managed pools
    /// apart).
    pub leaked_bytes: u64,
    pub leaked_blocks: u64,
    pub leaked_pinned_host_bytes: u64,
    pub groups: Vec<LeakGroup>,
    /// The allocated layer: tensors (annotated blocks, a snapshot's tensors) never freed,
    /// in requested bytes; inside reserved memory a caching allocator keeps anyway, they
    /// are where a leak shows. Zero and empty without an allocated layer.
    pub leaked_tensor_bytes: u64,
    pub leaked_tensors: u64,
    pub tensor_groups: Vec<LeakGroup>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct LeakGroup {
    pub pid: u32,
    /// Its process's host: with the pid, which process (snapshots all read as pid 0, each
    /// its own host). Not in the JSON, whose pid and device say it for traces.
    #[serde(skip)]
    pub host: String,
    /// Whether the process exited normally (else: killed, and this is what it held).
    pub complete: bool,
    /// Device ordinal; for pinned host memory, the device current when it was allocated.
    pub device: i32,
    pub kind: &'static str,
    pub api: &'static str,
    #[serde(skip_serializing_if = "is_zero")]
    pub stack: u64,
    pub bytes: u64,
    pub blocks: u64,
    /// Run times of the oldest and newest allocation in the group.
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// The stack's frames that matter, innermost first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<ShownFrame>,
}

impl LeakGroup {
    /// `api <- f (file:line) <- ...`: who allocated, for one line of text.
    pub fn who(&self) -> String {
        stacks::who(self.api, &self.frames)
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl LeakGroup {
    /// Whether its bytes are device memory (not pinned host memory, not a managed pool's).
    pub fn device_memory(&self) -> bool {
        Kind::ALL
            .iter()
            .any(|k| k.name() == self.kind && k.is_device_memory())
    }
}

/// One live allocation, as leaks groups it.
struct Held {
    dev: i32,
    api: vramtrace_schema::Api,
    /// The API's kind, or host / managed pool where the event's location said so.
    kind: Kind,
    stack: u64,
    bytes: u64,
    t: u64,
}

/// Live allocations grouped by process, device, API and stack, largest first; a
/// snapshot's stacks that read alike (they differ in frames the views leave out, or in
/// their labels) as one group, named by the least stack id.
fn grouped(run: &Run, live: impl Fn(&crate::model::ProcessModel) -> Vec<Held>) -> Vec<LeakGroup> {
    let mut groups: Vec<LeakGroup> = Vec::new();
    for (i, p) in run.processes.iter().enumerate() {
        let mut alike: std::collections::HashMap<_, usize> = Default::default();
        let mut by: Map<(i32, vramtrace_schema::Api, Kind, u64), Vec<Held>> = Map::default();
        for h in live(p) {
            by.entry((h.dev, h.api, h.kind, h.stack))
                .or_default()
                .push(h);
        }
        for ((dev, api, kind, stack), held) in by {
            let group = LeakGroup {
                pid: p.header.pid,
                host: p.header.host.clone(),
                complete: p.ended(),
                device: dev,
                kind: kind.name(),
                api: api.name(),
                stack,
                bytes: held.iter().fold(0u64, |a, h| a.saturating_add(h.bytes)),
                blocks: held.len() as u64,
                first_time_ns: run.time_of(i, held.iter().map(|h| h.t).min().unwrap_or(0)),
                last_time_ns: run.time_of(i, held.iter().map(|h| h.t).max().unwrap_or(0)),
                frames: stacks::shown(&p.stacks, stack),
            };
            let snapshots = p.categories.by_stack.contains_key(&stack);
            if !snapshots || group.frames.is_empty() {
                groups.push(group);
                continue;
            }
            let key = (dev, api, kind, group.frames.clone());
            match alike.get(&key) {
                Some(&at) => {
                    let g: &mut LeakGroup = &mut groups[at];
                    g.bytes = g.bytes.saturating_add(group.bytes);
                    g.blocks = g.blocks.saturating_add(group.blocks);
                    g.first_time_ns = g.first_time_ns.min(group.first_time_ns);
                    g.last_time_ns = g.last_time_ns.max(group.last_time_ns);
                    g.stack = g.stack.min(group.stack);
                }
                None => {
                    alike.insert(key, groups.len());
                    groups.push(group);
                }
            }
        }
    }
    groups.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.pid.cmp(&b.pid))
            .then(a.device.cmp(&b.device))
            .then(a.api.cmp(b.api))
            .then(a.kind.cmp(b.kind))
            .then(a.stack.cmp(&b.stack))
    });
    groups
}

/// The leaks at the default layer (tensors where the run has them).
pub fn build(run: &Run) -> Leaks {
    build_at(run, None)
}

/// `layer`: the one asked for (`--layer`); by default tensors where the run has them.
pub fn build_at(run: &Run, layer: Option<Layer>) -> Leaks {
    let groups = grouped(run, |p| {
        p.live_blocks()
            .map(|b: &Block| Held {
                dev: b.dev,
                api: b.api,
                kind: b.kind(),
                stack: b.stack,
                bytes: b.size,
                t: b.t,
            })
            .collect()
    });
    let tensor_groups = grouped(run, |p| {
        p.layers
            .live_tensors()
            .map(|(dev, requested, key, t)| Held {
                dev,
                api: key.api,
                kind: key.api.kind(),
                stack: key.stack,
                bytes: requested,
                t,
            })
            .collect()
    });
    let device: Vec<&LeakGroup> = groups.iter().filter(|g| g.device_memory()).collect();
    Leaks {
        format: "vramtrace-leaks",
        version: super::JSON_VERSION,
        start_unix_ns: run.start_unix_ns,
        layer: Layer::of(run, layer).name(),
        both_layers: layer.is_none(),
        leaked_bytes: device.iter().fold(0u64, |a, g| a.saturating_add(g.bytes)),
        leaked_blocks: device.iter().map(|g| g.blocks).sum(),
        leaked_pinned_host_bytes: groups
            .iter()
            .filter(|g| g.kind == "host")
            .map(|g| g.bytes)
            .sum(),
        groups,
        leaked_tensor_bytes: tensor_groups
            .iter()
            .fold(0u64, |a, g| a.saturating_add(g.bytes)),
        leaked_tensors: tensor_groups.iter().map(|g| g.blocks).sum(),
        tensor_groups,
    }
}
