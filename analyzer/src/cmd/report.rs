//! `vramtrace report -o FILE.html TRACE|DIR|SNAPSHOT...`: one self-contained HTML file.

use super::common;
use crate::render::report::{self, Report};
use crate::views::baseline::{overlay, Baseline};
use crate::views::marks::MarkWatch;
use crate::views::moments::MomentWatch;
use crate::views::oom::OomWatch;
use crate::views::timeline::TimelineBuilder;
use crate::views::{diff, leaks, plot, summary};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The HTML file to write.
    #[arg(short, long, value_name = "FILE.html")]
    pub output: PathBuf,
    /// Timeline bucket width, e.g. 10ms (default: automatic).
    #[arg(long, value_name = "DURATION", value_parser = common::duration)]
    pub resolution: Option<u64>,
    /// Replace FILE if it exists (vramtrace otherwise never writes over a file).
    #[arg(long)]
    pub force: bool,
    /// Another run to compare with (a trace, directory, snapshot or pack): its lines are
    /// drawn dashed on each GPU's plot, and `diff`'s verdict against it heads the page.
    #[arg(long, value_name = "RUN")]
    pub baseline: Option<PathBuf>,
    /// Trace files, directories of traces, PyTorch snapshots or packs.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn report(args: ReportArgs) -> Result<i32, String> {
    common::check_output(&args.output, args.force)?;
    let mut timeline = TimelineBuilder::new(args.resolution);
    let mut oom = OomWatch::default();
    let mut marks = MarkWatch::default();
    let mut moments = MomentWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| {
        timeline.step(s);
        oom.step(s);
        marks.step(s);
        moments.step(s);
    })? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let summary = summary::build(&run);
    let timeline = timeline.finish(&run);
    let oom = oom.finish(&run);
    let leaks = leaks::build(&run);
    let mut plots = plot::build(&timeline, &marks.finish(&run), &summary, &oom);
    let baseline = match &args.baseline {
        Some(path) => match baseline(path, args.resolution, &run, &mut plots)? {
            Ok(b) => Some(b),
            Err(code) => return Ok(code),
        },
        None => None,
    };
    let view = crate::views::report::build(crate::views::report::Inputs {
        run: &run,
        summary: &summary,
        oom: &oom,
        leaks: &leaks,
        plots,
        moments,
    });
    let page = report::page(&Report {
        view: &view,
        summary: &summary,
        oom: &oom,
        leaks: &leaks,
        baseline: baseline.as_ref(),
    });
    common::write(&args.output, &page, args.force)?;
    eprintln!(
        "vramtrace: wrote {} ({})",
        args.output.display(),
        crate::units::bytes(page.len() as u64)
    );
    Ok(common::status(&run))
}

/// The baseline of `--baseline`: read, its lines added to `plots`, compared with `run`.
fn baseline(
    path: &std::path::Path,
    resolution: Option<u64>,
    run: &crate::replay::Run,
    plots: &mut [plot::DevicePlot],
) -> Result<Result<Baseline, i32>, String> {
    let mut timeline = TimelineBuilder::new(resolution);
    let mut oom = OomWatch::default();
    let mut marks = MarkWatch::default();
    let base = match common::load(
        std::slice::from_ref(&path.to_path_buf()),
        Default::default(),
        |s| {
            timeline.step(s);
            oom.step(s);
            marks.step(s);
        },
    )? {
        Ok(run) => run,
        Err(code) => return Ok(Err(code)),
    };
    let summary = summary::build(&base);
    let timeline = timeline.finish(&base);
    let oom = oom.finish(&base);
    let theirs = plot::build(&timeline, &marks.finish(&base), &summary, &oom);
    let (not_drawn, cut_at_run_end) = overlay(plots, &theirs);
    Ok(Ok(Baseline {
        name: path.display().to_string(),
        diff: diff::build_at(&base, run, diff::common_layer(&base, run)),
        not_drawn,
        cut_at_run_end,
    }))
}
