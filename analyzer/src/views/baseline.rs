//! `report --baseline A`: another run drawn on this run's plots, on the same axes (its
//! reserved and allocated lines, dashed, each run's time from its own start), and `diff`'s
//! verdict against it, GPU by GPU.

use super::diff::DiffView;
use super::plot::{DevicePlot, Line};

pub struct Baseline {
    /// The baseline as the command line named it.
    pub name: String,
    /// This run (B) against the baseline (A).
    pub diff: DiffView,
    /// The baseline's GPUs that no plot of this run has (their lines are not drawn).
    pub not_drawn: Vec<String>,
    /// The baseline ran many times longer than this run, and its lines were cut at this
    /// run's end (the whole baseline would squash the run to a sliver).
    pub cut_at_run_end: bool,
}

/// How many times longer than the run a baseline may be before it is cut at the run's end.
const SQUASHED: u64 = 4;

/// The layers of the baseline drawn: the device line (NVML, the whole GPU) would add a
/// third dashed line that is mostly other programs' memory.
const DRAWN: [&str; 2] = ["reserved", "allocated"];

/// Adds to each of `plots` the baseline's lines of the same GPU: for each drawn layer the
/// first line (the run's own sum where the GPU had several processes). GPUs are matched
/// by number where each run ran on one host (two machines' `GPU 0` are the same card of
/// the job), else by host and number. A baseline more than [`SQUASHED`] times longer than
/// the run is cut at the run's end, so that the time axis stays the run's. Returns the baseline GPUs left undrawn, and whether a
/// line was cut so.
pub fn overlay(plots: &mut [DevicePlot], baseline: &[DevicePlot]) -> (Vec<String>, bool) {
    let one_host = |p: &[DevicePlot]| {
        p.iter()
            .all(|x| p.first().is_some_and(|f| f.host == x.host))
    };
    let by_number = one_host(plots) && one_host(baseline);
    let mut not_drawn = Vec::new();
    let mut cut = false;
    for b in baseline {
        let Some(p) = plots
            .iter_mut()
            .find(|p| p.gpu == b.gpu && (by_number || p.host == b.host))
        else {
            not_drawn.push(b.title.clone());
            continue;
        };
        // The axis spans both runs, unless the baseline is many times longer: the run's
        // own lines would be squashed into a sliver, so the baseline is cut at the run's
        // end (and the page says so).
        let run_end = p.end_ns();
        let end = match b.end_ns() > run_end.saturating_mul(SQUASHED) {
            true => run_end,
            false => u64::MAX,
        };
        for layer in DRAWN {
            if let Some(l) = b.lines.iter().find(|l| l.layer == layer) {
                let points: Vec<(u64, u64)> =
                    l.points.iter().copied().filter(|x| x.0 <= end).collect();
                cut |= points.len() < l.points.len();
                p.lines.push(Line {
                    layer: l.layer,
                    who: "baseline".into(),
                    points,
                    baseline: true,
                });
            }
        }
    }
    (not_drawn, cut)
}
