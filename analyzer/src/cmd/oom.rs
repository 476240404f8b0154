//! `vramtrace oom [--json] TRACE|DIR...`: a post-mortem of each failed allocation.

use super::common;
use crate::render;
use crate::views::oom::OomWatch;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct OomArgs {
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn oom(args: OomArgs) -> Result<i32, String> {
    let mut watch = OomWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| watch.step(s))? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let view = watch.finish(&run);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::oom::text(&view))?;
    }
    Ok(common::status(&run))
}
