//! `vramtrace report -o FILE.html TRACE|DIR...`: one self-contained HTML file.

use super::common;
use crate::render::flamegraph;
use crate::render::html::{self, Report};
use crate::views::oom::OomWatch;
use crate::views::timeline::TimelineBuilder;
use crate::views::{leaks, summary};
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
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn report(args: ReportArgs) -> Result<i32, String> {
    common::check_output(&args.output, args.force)?;
    let mut timeline = TimelineBuilder::new(args.resolution);
    let mut oom = OomWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| {
        timeline.step(s);
        oom.step(s);
    })? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let summary = summary::build(&run);
    timeline.merge_snapshots(&run, &args.paths);
    let timeline = timeline.finish(&run);
    let oom = oom.finish(&run);
    let leaks = leaks::build(&run);
    // The groups at each device's peak, as the summary already has them.
    let folded = flamegraph::folded_groups(
        &summary
            .devices
            .iter()
            .map(|d| (d.host.as_str(), d.gpu.as_str(), &d.at_peak[..]))
            .collect::<Vec<_>>(),
    );
    let svg = flamegraph::svg(&folded, "Device memory live at the peak", "nothing live").ok();
    let page = html::render(&Report {
        summary: &summary,
        timeline: &timeline,
        oom: &oom,
        leaks: &leaks,
        flamegraph: svg.as_deref(),
    });
    common::write(&args.output, &page, args.force)?;
    eprintln!("vramtrace: wrote {}", args.output.display());
    Ok(common::status(&run))
}
