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
}

/// The layers of the baseline drawn: the device line (NVML, the whole GPU) would add a
/// third dashed line that is mostly other programs' memory.
const DRAWN: [&str; 2] = ["reserved", "allocated"];

/// Adds to each of `plots` the baseline's lines of the same GPU: for each drawn layer the
/// first line (the run's own sum where the GPU had several processes). GPUs are matched
/// by number where each run ran on one host (two machines' `GPU 0` are the same card of
/// the job), else by host and number. Returns the baseline GPUs left undrawn.
pub fn overlay(plots: &mut [DevicePlot], baseline: &[DevicePlot]) -> Vec<String> {
    let one_host = |p: &[DevicePlot]| {
        p.iter()
            .all(|x| p.first().is_some_and(|f| f.host == x.host))
    };
    let by_number = one_host(plots) && one_host(baseline);
    let mut not_drawn = Vec::new();
    for b in baseline {
        let Some(p) = plots
            .iter_mut()
            .find(|p| p.gpu == b.gpu && (by_number || p.host == b.host))
        else {
            not_drawn.push(b.title.clone());
            continue;
        };
        for layer in DRAWN {
            if let Some(l) = b.lines.iter().find(|l| l.layer == layer) {
                p.lines.push(Line {
                    layer: l.layer,
                    who: "baseline".into(),
                    points: l.points.clone(),
                    baseline: true,
                });
            }
        }
    }
    not_drawn
}
