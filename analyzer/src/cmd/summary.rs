//! `vramtrace summary [--json] TRACE|DIR...`: one screen per run.

use super::common;
use crate::render;
use crate::views::preallocation::PreallocationWatch;
use crate::views::summary;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SummaryArgs {
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn summary(args: SummaryArgs) -> Result<i32, String> {
    let mut preallocations = PreallocationWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| preallocations.step(s))? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let mut view = summary::build(&run);
    view.preallocations = preallocations.finish(&run);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::summary::text(&view))?;
    }
    Ok(common::status(&run))
}
