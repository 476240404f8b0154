//! `vramtrace export --format parquet -o DIR INPUT...`: each input (a run's directory, a
//! trace, a snapshot, a pack) as its own run's partitions of the dataset at DIR, beside
//! those of runs exported there before.

use super::common;
use crate::render::parquet::{self, Dataset, EventSpill};
use crate::replay::Run;
use crate::views::marks::MarkWatch;
use crate::views::summary;
use std::path::{Path, PathBuf};

pub fn export(root: &Path, inputs: &[PathBuf], replace: bool) -> Result<i32, String> {
    let mut status = 0;
    for input in inputs {
        let mut spill = EventSpill::new(root)?;
        let mut marks = MarkWatch::default();
        let mut error = None;
        let loaded = common::load(std::slice::from_ref(input), Default::default(), |s| {
            if error.is_none() {
                error = spill.step(s).err();
            }
            marks.step(s);
        })?;
        let run = match loaded {
            Ok(run) => run,
            Err(code) => {
                status = status.max(code);
                continue;
            }
        };
        if let Some(e) = error {
            return Err(format!("{}: cannot spill the events: {e}", root.display()));
        }
        let id = run_id(&run, input);
        let summary = summary::build(&run);
        let marks = marks.finish(&run);
        let dataset = Dataset::new(root, &id, replace);
        let rank = |p: usize| summary.processes[p].rank.clone();
        let name = |p: usize| {
            let m = &run.processes[p];
            let host = parquet::partition_value(&m.header.host);
            format!("{host}-{}-{p}.parquet", m.header.pid)
        };
        let stacks: Vec<Vec<u64>> = (0..run.processes.len())
            .map(|p| spill.stacks_of(p))
            .collect();
        let events = spill.finish(&run, &dataset, rank, name)?;
        for (p, model) in run.processes.iter().enumerate() {
            parquet::write_tables(
                &dataset,
                &summary,
                model,
                p,
                rank(p).as_deref(),
                &name(p),
                &stacks[p],
            )?;
            let origin = run.origins[p];
            parquet::write_held(
                &dataset,
                model,
                p,
                origin,
                &marks,
                rank(p).as_deref(),
                &name(p),
            )?;
        }
        if marks.dropped > 0 {
            eprintln!(
                "vramtrace: {}: {} past the first {} were not exported",
                crate::render::escape::terminal(&input.display().to_string()),
                crate::units::count(marks.dropped, "marker"),
                crate::views::marks::MAX_MARKERS,
            );
        }
        parquet::write_gpus(&dataset, &summary, |d| marks.capacity.get(d).copied())?;
        eprintln!(
            "vramtrace: {}: run {}: {} and {} written to {}",
            crate::render::escape::terminal(&input.display().to_string()),
            crate::render::escape::terminal(&id),
            crate::units::count(run.processes.len() as u64, "process"),
            crate::units::count(events, "event"),
            crate::render::escape::terminal(&root.display().to_string()),
        );
        status = status.max(common::status(&run));
    }
    Ok(status)
}

/// The run's id as its traces record it; a run that records none (traces written outside
/// `vramtrace run` and a launcher, snapshots) is named by its input's file name and its
/// start, so that two such runs exported into one dataset stay two.
fn run_id(run: &Run, input: &Path) -> String {
    run.processes
        .iter()
        .find_map(|p| crate::run_id::of_header(&p.header))
        .unwrap_or_else(|| {
            let name = input.file_name().unwrap_or(input.as_os_str());
            format!("{}-{}", name.to_string_lossy(), run.start_unix_ns)
        })
}
