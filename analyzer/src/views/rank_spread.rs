//! How unevenly the ranks of a distributed run use memory: the spread of their peaks, the
//! ranks furthest above the median with what they hold that the median rank does not,
//! and the ranks that ran out of memory in the order they did.
//!
//! Ranks are compared at one layer for all: their tensors (requested bytes) where every
//! rank has an allocated layer, their reserved memory otherwise - the layer [`RankRow`]'s
//! `highest` uses. A rank's peak is its most on any one of its devices.

use super::groups::{self, Group};
use super::ranks::RankRow;
use super::summary::ProcessSummary;
use crate::replay::Run;
use serde::Serialize;
use std::collections::BTreeMap;

/// Ranks listed as outliers at most.
pub const OUTLIERS: usize = 5;
/// Call sites listed per outlier at most.
pub const SITES: usize = 3;

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct RankSpread {
    /// `allocated` (live tensors, requested bytes) or `reserved`.
    pub layer: &'static str,
    pub ranks: usize,
    pub min_bytes: u64,
    pub min_rank: String,
    /// The lower median of the ranks' peaks, and the first rank (in rank order) at it.
    pub median_bytes: u64,
    pub median_rank: String,
    pub max_bytes: u64,
    pub max_rank: String,
    /// Ranks whose peak is above the median.
    pub above_median: usize,
    /// The ranks furthest above the median (at most [`OUTLIERS`]), furthest first, equal
    /// ones in rank order.
    pub outliers: Vec<Outlier>,
    /// Each rank that had an allocation fail, by the time of its first failure.
    pub failures: Vec<RankFailure>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct Outlier {
    pub rank: String,
    pub pid: u32,
    pub host: String,
    pub peak_bytes: u64,
    pub above_median_bytes: u64,
    /// The call sites it held more of at its peak than the median rank did at its own,
    /// most first (at most [`SITES`]).
    pub holds_more: Vec<SiteExcess>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct SiteExcess {
    /// `api <- function (file:line) <- ...`, as the summary names a group.
    pub who: String,
    pub bytes: u64,
    pub median_rank_bytes: u64,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct RankFailure {
    pub rank: String,
    pub pid: u32,
    pub host: String,
    /// Run time of the rank's first failed allocation.
    pub time_ns: u64,
    pub requested_bytes: u64,
    pub device: i32,
}

/// The spread of `rows` (one per process with a rank); `None` below two ranks.
pub fn of(run: &Run, processes: &[ProcessSummary], rows: &[RankRow]) -> Option<RankSpread> {
    if rows.len() < 2 {
        return None;
    }
    let by_tensors = super::ranks::by_tensors(rows);
    let peak = |r: &RankRow| r.compared_peak(by_tensors);
    // Rows are in rank order: a stable sort keeps it among equal peaks.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&k| peak(&rows[k]));
    let (min, max) = (order[0], order[order.len() - 1]);
    let median_bytes = peak(&rows[order[(order.len() - 1) / 2]]);
    let median = (0..rows.len())
        .find(|&k| peak(&rows[k]) == median_bytes)
        .unwrap_or(min);
    let held = |r: &RankRow| held_at_peak(run, processes, r, by_tensors);
    let median_held = held(&rows[median]);
    // Furthest first; among equal peaks, in rank order.
    let mut above: Vec<&RankRow> = rows.iter().filter(|r| peak(r) > median_bytes).collect();
    above.sort_by_key(|r| std::cmp::Reverse(peak(r)));
    let above_median = above.len();
    let outliers: Vec<Outlier> = above
        .into_iter()
        .take(OUTLIERS)
        .map(|r| Outlier {
            rank: r.rank.clone(),
            pid: r.pid,
            host: r.host.clone(),
            peak_bytes: peak(r),
            above_median_bytes: peak(r) - median_bytes,
            holds_more: excess(&held(r), &median_held),
        })
        .collect();
    let mut failures: Vec<RankFailure> = rows
        .iter()
        .filter_map(|r| {
            let p = processes
                .iter()
                .find(|p| p.pid == r.pid && p.host == r.host && p.rank.as_ref() == Some(&r.rank))?;
            let f = p.failures.iter().min_by_key(|f| f.time_ns)?;
            Some(RankFailure {
                rank: r.rank.clone(),
                pid: r.pid,
                host: r.host.clone(),
                time_ns: f.time_ns,
                requested_bytes: f.requested_bytes,
                device: f.device,
            })
        })
        .collect();
    // Equal times keep rank order.
    failures.sort_by_key(|f| f.time_ns);
    Some(RankSpread {
        layer: if by_tensors { "allocated" } else { "reserved" },
        ranks: rows.len(),
        min_bytes: peak(&rows[min]),
        min_rank: rows[min].rank.clone(),
        median_bytes,
        median_rank: rows[median].rank.clone(),
        max_bytes: peak(&rows[max]),
        max_rank: rows[max].rank.clone(),
        above_median,
        outliers,
        failures,
    })
}

/// What the rank held at its peak, by who allocated it: its tensors at its allocated peak,
/// or its blocks at its reserved peak, on the device where its peak was.
fn held_at_peak(
    run: &Run,
    processes: &[ProcessSummary],
    r: &RankRow,
    by_tensors: bool,
) -> BTreeMap<String, u64> {
    let Some(i) = processes
        .iter()
        .position(|p| p.pid == r.pid && p.host == r.host && p.rank.as_ref() == Some(&r.rank))
    else {
        return BTreeMap::new();
    };
    let groups: Vec<Group> = if by_tensors {
        let model = &run.processes[i];
        model
            .layers
            .tensors
            .values()
            .max_by_key(|d| d.peak_reserved)
            .map(|d| groups::of_process(model, &d.peak_groups))
            .unwrap_or_default()
    } else {
        processes[i]
            .devices
            .iter()
            .max_by_key(|d| d.peak_reserved_bytes)
            .map(|d| d.at_peak.clone())
            .unwrap_or_default()
    };
    let mut by_who = BTreeMap::new();
    for g in groups {
        *by_who.entry(g.who()).or_insert(0) += g.bytes;
    }
    by_who
}

/// The sites `rank` held more of than `median` did, most first.
fn excess(rank: &BTreeMap<String, u64>, median: &BTreeMap<String, u64>) -> Vec<SiteExcess> {
    let mut more: Vec<SiteExcess> = rank
        .iter()
        .filter_map(|(who, &bytes)| {
            let median_rank_bytes = median.get(who).copied().unwrap_or(0);
            (bytes > median_rank_bytes).then(|| SiteExcess {
                who: who.clone(),
                bytes,
                median_rank_bytes,
            })
        })
        .collect();
    more.sort_by(|a, b| {
        (b.bytes - b.median_rank_bytes)
            .cmp(&(a.bytes - a.median_rank_bytes))
            .then_with(|| a.who.cmp(&b.who))
    });
    more.truncate(SITES);
    more
}
