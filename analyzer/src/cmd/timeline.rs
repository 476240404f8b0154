//! `vramtrace timeline [--resolution D] [--json] [--svg FILE] TRACE|DIR...`: live bytes
//! over time, as CSV (default) or JSON on stdout, and as an SVG plot.

use super::common;
use crate::render;
use crate::views::layer::Layer;
use crate::views::marks::MarkWatch;
use crate::views::oom::OomWatch;
use crate::views::timeline::TimelineBuilder;
use crate::views::{plot, summary};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct TimelineArgs {
    /// Bucket width, e.g. 10ms, 1s (default: automatic, at most 2000 buckets).
    #[arg(long, value_name = "DURATION", value_parser = common::duration)]
    pub resolution: Option<u64>,
    /// Print JSON instead of CSV (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Also write the plot as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Only the series of one layer: `allocated` (tensors) or `reserved` (device memory
    /// from the driver). Without it, every layer, each series naming its own.
    #[arg(long, value_enum)]
    pub layer: Option<Layer>,
    /// Replace FILE if it exists (vramtrace otherwise never writes over a file).
    #[arg(long)]
    pub force: bool,
    /// Trace files, directories of traces, or PyTorch snapshots.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn timeline(args: TimelineArgs) -> Result<i32, String> {
    if let Some(svg) = &args.svg {
        common::check_output(svg, args.force)?;
    }
    let mut builder = TimelineBuilder::new(args.resolution);
    let mut marks = MarkWatch::default();
    let mut oom = OomWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| {
        builder.step(s);
        if args.svg.is_some() {
            marks.step(s);
            oom.step(s);
        }
    })? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_no_tensors(&run, args.layer);
    let mut view = builder.finish(&run);
    if let Some(layer) = args.layer {
        view.keep_layer(layer);
    }
    if let Some(svg) = &args.svg {
        // The same plots as the report's: markers, phases, capacity, peak, failures.
        let summary = summary::build(&run);
        let plots = plot::build(&view, &marks.finish(&run), &summary, &oom.finish(&run));
        common::write(svg, &render::svg::document(&plots), args.force)?;
    }
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::csv::timeline(&view))?;
    }
    Ok(common::status(&run))
}
