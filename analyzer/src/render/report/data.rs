//! The data the page's script reads, as compact JSON: per GPU its plotted lines (for the
//! hover read-out) and its live set at each moment kept, with the peak and each failure
//! among them (for the click). Who allocated is a table of strings, each moment's groups
//! point into it: the same call sites repeat from moment to moment.

use super::super::plot;
use super::{Budget, Report};
use crate::model::Map;
use crate::views::groups::Group;
use serde_json::{json, Value};

struct Who {
    names: Vec<String>,
    index: Map<String, usize>,
}

impl Who {
    fn of(&mut self, g: &Group) -> usize {
        let name = g.who();
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        self.names.push(name.clone());
        self.index.insert(name, self.names.len() - 1);
        self.names.len() - 1
    }

    /// `[who, pid, bytes, count]` per group.
    fn groups(&mut self, groups: &[Group]) -> Value {
        groups
            .iter()
            .take(crate::views::moments::TOP)
            .map(|g| json!([self.of(g), g.pid, g.bytes, g.blocks]))
            .collect()
    }
}

/// Moments kept out of `n`, evenly: `keep` of them.
fn thinned(n: usize, keep: usize) -> Vec<usize> {
    if keep >= n {
        return (0..n).collect();
    }
    if keep == 0 {
        return Vec::new();
    }
    let mut v: Vec<usize> = (0..keep).map(|i| i * n / keep).collect();
    v.dedup();
    v
}

pub fn json(r: &Report, budget: Budget, notes: &mut Vec<String>) -> String {
    let v = r.view;
    let mut who = Who {
        names: Vec::new(),
        index: Map::default(),
    };
    let kept = thinned(v.moments.len(), budget.moments);
    if kept.len() < v.moments.len() {
        notes.push(format!(
            "live sets: kept at {} of {} moments (and at each peak and failure)",
            kept.len(),
            v.moments.len()
        ));
    } else if !v.moments.is_empty() {
        notes.push(format!(
            "live sets: kept at {} moments across the run, each with its {} largest groups (and at each peak and failure)",
            v.moments.len(),
            crate::views::moments::TOP
        ));
    }
    let devices: Vec<Value> = v
        .plots
        .iter()
        .take(budget.plots)
        .map(|p| {
            let lines: Vec<Value> = p
                .lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    json!({
                        "name": plot::name(l),
                        "color": plot::color(l, i),
                        "t": l.points.iter().map(|x| x.0).collect::<Vec<_>>(),
                        "b": l.points.iter().map(|x| x.1).collect::<Vec<_>>(),
                    })
                })
                .collect();
            // [time, label, layer, bytes, count, groups, groups live in all]
            let mut moments: Vec<Value> = Vec::new();
            for &k in &kept {
                let m = &v.moments[k];
                if let Some(d) = m
                    .devices
                    .iter()
                    .find(|d| d.host == p.host && d.gpu == p.gpu)
                {
                    moments.push(json!([
                        m.time_ns,
                        "",
                        d.layer,
                        d.bytes,
                        d.blocks,
                        who.groups(&d.groups),
                        d.group_count
                    ]));
                }
            }
            let special = v
                .peaks
                .iter()
                .map(|h| (h, "peak"))
                .chain(v.failures.iter().map(|h| (h, "failed allocation")));
            for (h, label) in special.filter(|(h, _)| h.host == p.host && h.gpu == p.gpu) {
                moments.push(json!([
                    h.time_ns,
                    label,
                    h.layer,
                    h.bytes,
                    h.count,
                    who.groups(&h.groups),
                    h.group_count
                ]));
            }
            moments.sort_by_key(|m| m[0].as_u64());
            // What the live set calls each process of the GPU (a snapshot by its file).
            let names: serde_json::Map<String, Value> = r
                .summary
                .devices
                .iter()
                .filter(|d| d.host == p.host && d.gpu == p.gpu)
                .flat_map(|d| &d.pids)
                .map(|&pid| {
                    let name = crate::views::process_name::of(r.summary, &p.host, pid);
                    (pid.to_string(), Value::from(name))
                })
                .collect();
            json!({
                "title": p.title,
                "peak_bytes": p.peak_bytes,
                "peak_time_ns": p.peak_time_ns,
                "bucket_ns": p.bucket_ns,
                "lines": lines,
                "moments": moments,
                "names": names,
            })
        })
        .collect();
    json!({
        "start_unix_ns": r.summary.start_unix_ns,
        "timeless": v.timeless,
        "devices": devices,
        "who": who.names,
    })
    .to_string()
}
