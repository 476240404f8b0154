//! Live memory grouped by who allocated it: the API and (later) the call stack, and for
//! run-level views the process too. Largest first.

use super::stacks::{self, ShownFrame};
use crate::model::Map;
use crate::model::{DeviceUsage, GroupBytes, GroupKey, ProcessModel};
use crate::replay::{Run, RunGroupKey};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    /// The process, in run-level views.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The process's device ordinal, in run-level views.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    pub api: &'static str,
    /// Stack id; absent while stacks are not recorded.
    #[serde(skip_serializing_if = "is_zero")]
    pub stack: u64,
    pub bytes: u64,
    pub blocks: u64,
    /// The stack's frames that matter, innermost first (`--all-frames`: every frame).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<ShownFrame>,
    /// The category the program named for it with a range: one call site allocating in
    /// two ranges is two groups, told apart by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<crate::model::Category>,
    /// PyTorch's own label of its tensors, from a snapshot: the `user_metadata` they were
    /// allocated under, the private pool that held them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<crate::model::Label>,
    /// Its tensors had different labels (then `label` is absent).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub labels_differ: bool,
}

impl Group {
    /// `api <- f (file:line) <- ...`: who allocated, for one line of text, with the
    /// category the program named for it (`[optimizer state]`) and PyTorch's label
    /// (`{user_metadata "comm"}`).
    pub fn who(&self) -> String {
        let mut who = stacks::who(self.api, &self.frames);
        if let Some(c) = self.category {
            who = format!("{who} [{}]", c.words());
        }
        if let Some(l) = &self.label {
            who = format!("{who} {{{}}}", l.words());
        } else if self.labels_differ {
            who = format!("{who} {{labels differ: peak --by label}}");
        }
        who
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Largest first; a snapshot's groups that read alike (process, device, API and the
/// frames shown) as one, named by the least stack id among them. A snapshot gives stacks
/// that differ only in frames the views leave out (torch's own, which tell a tensor's
/// category apart) or in their labels ids of their own; a trace's stacks stay apart
/// whatever they show. A merged group keeps a label its parts share, none where they
/// differ (`peak`'s `labels` splits by label). `categorized`: whether a group's stack is a
/// snapshot's.
fn sorted(groups: Vec<(Group, bool)>) -> Vec<Group> {
    let mut at: std::collections::HashMap<_, usize> = Default::default();
    let mut merged: Vec<Group> = Vec::with_capacity(groups.len());
    for (g, categorized) in groups {
        if !categorized || g.frames.is_empty() {
            merged.push(g);
            continue;
        }
        let key = (g.pid, g.device, g.api, g.frames.clone());
        match at.get(&key) {
            Some(&i) => {
                let m = &mut merged[i];
                m.bytes = m.bytes.saturating_add(g.bytes);
                m.blocks = m.blocks.saturating_add(g.blocks);
                m.stack = m.stack.min(g.stack);
                if m.label != g.label {
                    m.label = None;
                    m.labels_differ = true;
                }
            }
            None => {
                at.insert(key, merged.len());
                merged.push(g);
            }
        }
    }
    let mut groups = merged;
    groups.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| a.pid.cmp(&b.pid))
            .then_with(|| a.api.cmp(b.api))
            .then_with(|| a.stack.cmp(&b.stack))
    });
    groups
}

/// The group of `model`'s key `k`, and whether its stack is a snapshot's.
fn group(
    model: &ProcessModel,
    place: (Option<u32>, Option<i32>),
    k: &GroupKey,
    g: &GroupBytes,
) -> (Group, bool) {
    let group = Group {
        pid: place.0,
        device: place.1,
        api: k.api.name(),
        stack: k.stack,
        bytes: g.bytes,
        blocks: g.blocks,
        frames: stacks::shown(&model.stacks, k.stack),
        category: k.category,
        label: model.categories.labels.get(&k.stack).cloned(),
        labels_differ: false,
    };
    (group, model.categories.by_stack.contains_key(&k.stack))
}

/// One process's groups (no pid or device in them).
pub fn of_process(model: &ProcessModel, map: &Map<GroupKey, GroupBytes>) -> Vec<Group> {
    sorted(
        map.iter()
            .filter(|(_, g)| g.blocks > 0)
            .map(|(k, g)| group(model, (None, None), k, g))
            .collect(),
    )
}

/// A run device's groups, each naming its process and that process's ordinal.
pub fn of_run(run: &Run, map: &Map<RunGroupKey, GroupBytes>, ordinal_of: &OrdinalOf) -> Vec<Group> {
    sorted(
        map.iter()
            .filter(|(_, g)| g.blocks > 0)
            .map(|((process, k), g)| {
                let model = &run.processes[*process];
                let place = (Some(model.header.pid), ordinal_of.get(process).copied());
                group(model, place, k, g)
            })
            .collect(),
    )
}

/// For one run device: each process's ordinal for it.
pub type OrdinalOf = Map<usize, i32>;

/// Which ordinal each process uses for run device `index`.
pub fn ordinals(run: &Run, index: usize) -> OrdinalOf {
    let mut out = Map::default();
    for (p, model) in run.processes.iter().enumerate() {
        for &ordinal in model.devices.keys() {
            if run.devices.lookup(p, ordinal) == Some(index) {
                out.insert(p, ordinal);
            }
        }
    }
    out
}

/// Bytes per process in a run device's groups, largest first: (process index, bytes).
pub fn per_process(map: &Map<RunGroupKey, GroupBytes>) -> Vec<(usize, u64)> {
    let mut by: Map<usize, u64> = Map::default();
    for ((p, _), g) in map {
        let b = by.entry(*p).or_default();
        *b = b.saturating_add(g.bytes);
    }
    let mut v: Vec<(usize, u64)> = by.into_iter().filter(|(_, b)| *b > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// Shorthand used by run-level views: the device's groups at its peak or now.
pub fn run_device_groups(
    run: &Run,
    index: usize,
    usage: &DeviceUsage<RunGroupKey>,
    at_peak: bool,
) -> Vec<Group> {
    let map = if at_peak {
        &usage.peak_groups
    } else {
        &usage.groups
    };
    of_run(run, map, &ordinals(run, index))
}
