//! `vramtrace summary [--json] TRACE|DIR...`: one screen per run.

use super::common;
use crate::render;
use crate::views::layer::Layer;
use crate::views::preallocation::PreallocationWatch;
use crate::views::summary;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SummaryArgs {
    /// The layer whose groups are listed at each GPU's peak: `allocated` (tensors, where
    /// an allocator or a PyTorch snapshot tells them; the default there) or `reserved`.
    #[arg(long, value_enum)]
    pub layer: Option<Layer>,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files, directories of traces, or PyTorch snapshots.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn summary(args: SummaryArgs) -> Result<i32, String> {
    let mut preallocations = PreallocationWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| preallocations.step(s))? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_no_tensors(&run, args.layer);
    let mut view = summary::build_at(&run, args.layer);
    view.preallocations = preallocations.finish(&run);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print_styled(&render::summary::text(&view))?;
    }
    Ok(common::status(&run))
}
