//! The ranks of a distributed run side by side: each rank's peak, at the reserved and the
//! allocated layer, which rank peaked highest, and which failed. Ranks come from `RANK` in
//! a trace's header, or from a snapshot's file name (`rank3`, `rank_3`, `rank-3`).

use super::summary::ProcessSummary;
use serde::Serialize;

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct RankRow {
    pub rank: String,
    pub pid: u32,
    pub host: String,
    /// The most reserved bytes on any of its devices.
    pub peak_reserved_bytes: u64,
    /// The most requested bytes of live tensors on any of its devices; null without them.
    pub peak_requested_bytes: Option<u64>,
    pub failed_allocations: u64,
    /// This rank's peak is the run's highest (by tensors where every rank has them, by
    /// reserved memory otherwise).
    pub highest: bool,
}

/// Ranks in order: numerically where they are numbers.
pub fn order(rank: &str) -> (Option<u64>, &str) {
    (rank.parse().ok(), rank)
}

/// The ranks of the processes `pids` on `host`, each once, in order.
pub fn of_pids(s: &super::summary::Summary, host: &str, pids: &[u32]) -> Vec<String> {
    let mut ranks: Vec<String> = s
        .processes
        .iter()
        .filter(|p| p.host == host && pids.contains(&p.pid))
        .filter_map(|p| p.rank.clone())
        .collect();
    ranks.sort_by(|a, b| order(a).cmp(&order(b)));
    ranks.dedup();
    ranks
}

/// One row per process that has a rank, in rank order (numerically where they are numbers).
pub fn rows(processes: &[ProcessSummary]) -> Vec<RankRow> {
    let mut rows: Vec<RankRow> = processes
        .iter()
        .filter_map(|p| {
            let rank = p.rank.clone()?;
            Some(RankRow {
                rank,
                pid: p.pid,
                host: p.host.clone(),
                peak_reserved_bytes: p
                    .devices
                    .iter()
                    .map(|d| d.peak_reserved_bytes)
                    .max()
                    .unwrap_or(0),
                peak_requested_bytes: p
                    .devices
                    .iter()
                    .filter_map(|d| d.peak_requested_bytes)
                    .max(),
                failed_allocations: p.failed_allocations,
                highest: false,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        let n = |r: &RankRow| r.rank.parse::<u64>().ok();
        n(a).cmp(&n(b))
            .then_with(|| a.rank.cmp(&b.rank))
            .then(a.pid.cmp(&b.pid))
    });
    let by_tensors = by_tensors(&rows);
    let peak = |r: &RankRow| r.compared_peak(by_tensors);
    if let Some(top) = rows.iter().map(peak).max().filter(|&m| m > 0) {
        for r in rows.iter_mut().filter(|r| peak(r) == top) {
            r.highest = true;
        }
    }
    rows
}

/// Whether ranks are compared by their tensors (requested bytes): only where every rank
/// has an allocated layer, their reserved memory otherwise - never one by one and the
/// other by the other.
pub fn by_tensors(rows: &[RankRow]) -> bool {
    rows.iter().all(|r| r.peak_requested_bytes.is_some())
}

impl RankRow {
    /// The peak ranks are compared by ([`by_tensors`]).
    pub fn compared_peak(&self, by_tensors: bool) -> u64 {
        if by_tensors {
            self.peak_requested_bytes.unwrap_or(0)
        } else {
            self.peak_reserved_bytes
        }
    }
}
