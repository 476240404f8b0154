//! `vramtrace report -o FILE.html TRACE|DIR|SNAPSHOT...`: one self-contained HTML file.

use super::common;
use crate::render::report::{self, Report};
use crate::views::marks::MarkWatch;
use crate::views::moments::MomentWatch;
use crate::views::oom::OomWatch;
use crate::views::timeline::TimelineBuilder;
use crate::views::{leaks, plot, summary};
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
    let plots = plot::build(&timeline, &marks.finish(&run), &summary, &oom);
    let view = crate::views::report::build(crate::views::report::Inputs {
        run: &run,
        summary: &summary,
        oom: &oom,
        leaks: &leaks,
        plots,
        moments: moments.finish(&run),
    });
    let page = report::page(&Report {
        view: &view,
        summary: &summary,
        oom: &oom,
        leaks: &leaks,
    });
    common::write(&args.output, &page, args.force)?;
    eprintln!(
        "vramtrace: wrote {} ({})",
        args.output.display(),
        crate::units::bytes(page.len() as u64)
    );
    Ok(common::status(&run))
}
