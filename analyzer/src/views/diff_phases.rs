//! `diff`'s comparison phase by phase: the peak inside each phase of A against the same
//! phase of B, matched by rank, name and occurrence ("forward #3"), never by time.

use super::phase_peaks::{PhasePeak, PhasePeaks};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct PhaseDiff {
    /// The rank of the processes compared; null where each run's phases are one
    /// process's (then matched whatever its rank).
    pub rank: Option<String>,
    pub name: String,
    pub occurrence: u32,
    /// The peak inside the phase at the diff's layer; null where the run has no such phase.
    pub a_peak_bytes: Option<u64>,
    pub b_peak_bytes: Option<u64>,
    /// B minus A, where both have the phase.
    pub difference_bytes: Option<i128>,
}

/// The phases both runs have, and those only one has, in the order B's (then A's) began.
pub fn compare(a: &PhasePeaks, b: &PhasePeaks, layer: &str) -> Vec<PhaseDiff> {
    let peak = |p: &PhasePeak| match layer {
        // A process whose allocator had annotated nothing yet held no tensors.
        "allocated" => p.peak_allocated_bytes.unwrap_or(0),
        _ => p.peak_reserved_bytes,
    };
    let (ka, kb) = (keys(&a.phases), keys(&b.phases));
    let mut order: Vec<Key> = Vec::new();
    let mut by: BTreeMap<Key, (Option<u64>, Option<u64>)> = BTreeMap::new();
    for (side, phases, keys) in [(1, &b.phases, &kb), (0, &a.phases, &ka)] {
        for (p, key) in phases.iter().zip(keys) {
            let e = by.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                (None, None)
            });
            if side == 0 {
                e.0 = Some(peak(p));
            } else {
                e.1 = Some(peak(p));
            }
        }
    }
    order
        .into_iter()
        .map(|key| {
            let (a_peak, b_peak) = by[&key];
            let difference = match (a_peak, b_peak) {
                (Some(x), Some(y)) => Some(i128::from(y) - i128::from(x)),
                _ => None,
            };
            PhaseDiff {
                rank: key.0,
                name: key.1,
                occurrence: key.2,
                a_peak_bytes: a_peak,
                b_peak_bytes: b_peak,
                difference_bytes: difference,
            }
        })
        .collect()
}

/// A phase across runs: (rank, name, occurrence).
type Key = (Option<String>, String, u32);

/// Each phase's key; the rank left out where all of a run's phases are one process's, so
/// that a trace without a rank matches rank 0 of the other.
fn keys(phases: &[PhasePeak]) -> Vec<Key> {
    let one = phases.windows(2).all(|w| w[0].process == w[1].process);
    phases
        .iter()
        .map(|p| {
            let rank = if one { None } else { p.rank.clone() };
            (rank, p.name.clone(), p.occurrence)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, occurrence: u32, process: usize, reserved: u64) -> PhasePeak {
        PhasePeak {
            name: name.into(),
            occurrence,
            pid: 10 + process as u32,
            rank: Some(process.to_string()),
            start_ns: u64::from(occurrence) * 100,
            end_ns: u64::from(occurrence) * 100 + 50,
            peak_reserved_bytes: reserved,
            peak_allocated_bytes: None,
            process,
        }
    }

    fn run(phases: Vec<PhasePeak>) -> PhasePeaks {
        PhasePeaks {
            phases,
            markers_not_kept: 0,
        }
    }

    #[test]
    fn phases_match_by_rank_name_and_occurrence_and_one_sided_ones_are_kept() {
        let a = run(vec![
            phase("forward", 1, 0, 100),
            phase("forward", 1, 1, 100),
            phase("forward", 2, 0, 120),
        ]);
        let b = run(vec![
            phase("forward", 1, 0, 150),
            phase("forward", 1, 1, 90),
            phase("backward", 1, 1, 7),
        ]);
        let got: Vec<_> = compare(&a, &b, "reserved")
            .into_iter()
            .map(|d| {
                (
                    d.rank,
                    d.name,
                    d.occurrence,
                    d.a_peak_bytes,
                    d.b_peak_bytes,
                    d.difference_bytes,
                )
            })
            .collect();
        let r = |n: &str| Some(n.to_string());
        assert_eq!(
            got,
            [
                (r("0"), "forward".into(), 1, Some(100), Some(150), Some(50)),
                (r("1"), "forward".into(), 1, Some(100), Some(90), Some(-10)),
                (r("1"), "backward".into(), 1, None, Some(7), None),
                (r("0"), "forward".into(), 2, Some(120), None, None),
            ]
        );
        // One process on each side: matched whatever its rank.
        let solo = compare(
            &run(vec![phase("load", 1, 0, 5)]),
            &run(vec![phase("load", 1, 3, 8)]),
            "reserved",
        );
        assert_eq!(solo.len(), 1);
        assert_eq!(solo[0].difference_bytes, Some(3));
    }
}
