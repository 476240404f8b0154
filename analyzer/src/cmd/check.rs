//! `vramtrace check RUN --max-peak SIZE [--layer L] [--max-leaked SIZE] [--no-oom]
//! [--device N] [--baseline A --max-growth PCT] [--junit FILE]`: exit 0 when every limit
//! held, 1 when one broke, 2 when the run or a limit could not be read.

use super::common;
use crate::render;
use crate::replay::LoadOptions;
use crate::units::parse_size;
use crate::views::check::{self, CheckLayer, Limits};
use std::collections::BTreeMap;
use std::path::PathBuf;
use vramtrace_schema::Op;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The most a GPU's peak may reach (e.g. 20GiB), at --layer.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_peak: Option<u64>,
    /// The layer of --max-peak and --max-growth: allocated (tensors; the default where the
    /// run has them), reserved (else the default) or device (the driver's whole-GPU figure).
    #[arg(long, value_enum)]
    pub layer: Option<CheckLayer>,
    /// The most memory the run may leave never freed (tensors where it has them).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_leaked: Option<u64>,
    /// Fail if any allocation of device memory failed.
    #[arg(long)]
    pub no_oom: bool,
    /// Only this GPU (its number, as `GPU N` shows it).
    #[arg(long, value_name = "N")]
    pub device: Option<String>,
    /// A run to compare with (a trace, directory, snapshot or pack), for --max-growth.
    #[arg(long, value_name = "RUN", requires = "max_growth")]
    pub baseline: Option<PathBuf>,
    /// The most a GPU's peak may grow over the baseline's, in percent (e.g. 5%).
    #[arg(long, value_name = "PCT", value_parser = parse_percent, requires = "baseline")]
    pub max_growth: Option<f64>,
    /// Also write the checks as JUnit XML to FILE (created 0600; never written over
    /// unless --force).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Replace the --junit FILE if it exists.
    #[arg(long)]
    pub force: bool,
    /// Hold --max-peak to the phase NAME only (`vramtrace.phase(NAME)`, a marker NAME
    /// closed by /NAME; the last such phase of the run): its peak counts what was held
    /// when it began, as after `torch.cuda.reset_peak_memory_stats()`.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["max_leaked", "no_oom", "baseline"])]
    pub phase: Option<String>,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// The run: trace files, a directory, a PyTorch snapshot or a pack.
    #[arg(required = true, value_name = "RUN")]
    pub paths: Vec<PathBuf>,
}

/// `5%`, `5`, `0.5%`: a percentage.
fn parse_percent(s: &str) -> Result<f64, String> {
    let n = s.trim().trim_end_matches('%').trim();
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("invalid percentage {s:?}: use e.g. 5% or 0.5")),
    }
}

pub fn check(args: CheckArgs) -> Result<i32, String> {
    if args.max_peak.is_none()
        && args.max_leaked.is_none()
        && !args.no_oom
        && args.max_growth.is_none()
    {
        return Err("check: give at least one limit (--max-peak, --max-leaked, --no-oom, --baseline with --max-growth)".into());
    }
    if let Some(j) = &args.junit {
        common::check_output(j, args.force)?;
    }
    let options = match &args.phase {
        Some(name) => match phase_window(&args.paths, name)? {
            Ok(options) => options,
            Err(code) => return Ok(code),
        },
        None => LoadOptions::default(),
    };
    let run = match common::load(&args.paths, options, |_| {})? {
        Ok(run) => run,
        Err(_) => return Ok(2),
    };
    let baseline = match &args.baseline {
        Some(b) => match common::load(std::slice::from_ref(b), LoadOptions::default(), |_| {})? {
            Ok(run) => Some(run),
            Err(_) => return Ok(2),
        },
        None => None,
    };
    let limits = Limits {
        max_peak: args.max_peak,
        layer: args.layer,
        max_leaked: args.max_leaked,
        no_oom: args.no_oom,
        device: args.device.clone(),
        max_growth_percent: args.max_growth,
        phase: args.phase.clone(),
    };
    let view = check::build(&run, baseline.as_ref(), &limits);
    if let Some(j) = &args.junit {
        common::write(j, &render::check::junit(&view), args.force)?;
    }
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print_styled(&render::check::text(&view))?;
    }
    Ok(if view.broken > 0 { 1 } else { 0 })
}

/// The replay that gives the peaks of the last phase `name` of the run: one reading to
/// find the phase's markers, whose times the second reading starts and stops its peaks at.
/// Only the markers of that name are kept (a run marks any number of other points).
fn phase_window(paths: &[PathBuf], name: &str) -> Result<Result<LoadOptions, i32>, String> {
    if crate::model::names_a_range(name) {
        return Err(format!(
            "check --phase {name:?}: that is a category range (what memory is for), not a phase of the program"
        ));
    }
    let close = format!("/{name}");
    // Per process, the start of the phase open now; the last phase closed, of any process.
    let mut open: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut last: Option<(u64, u64)> = None;
    let found = common::load(paths, LoadOptions::default(), |step| {
        let e = step.event;
        if step.ended || e.api.op() != Op::Marker {
            return;
        }
        let Some(marker) = e.handle.and_then(|h| step.model.names.get(&h)) else {
            return;
        };
        if *marker == name {
            // Nested phases of one name: each close ends the innermost (at most a few kept).
            let starts = open.entry(step.process).or_default();
            if starts.len() < 64 {
                starts.push(step.time);
            }
        } else if *marker == close {
            if let Some(start) = open.get_mut(&step.process).and_then(Vec::pop) {
                last = Some((start, step.time));
            }
        }
    })?;
    if found.is_err() {
        return Ok(Err(2));
    }
    let Some((start, end)) = last else {
        eprintln!(
            "vramtrace check: the run has no phase {name:?} (a marker {name:?} closed by {:?} in one process)",
            close
        );
        return Ok(Err(2));
    };
    Ok(Ok(LoadOptions {
        until: Some(end),
        peaks_from: Some(start),
    }))
}
