//! `vramtrace leaks [--json] TRACE|DIR...`: what was never freed, grouped.

use super::common;
use crate::render;
use crate::views::leaks;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct LeaksArgs {
    /// Groups listed in the text view.
    #[arg(long, default_value_t = 30)]
    pub limit: usize,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn leaks(args: LeaksArgs) -> Result<i32, String> {
    let run = match common::load(&args.paths, Default::default(), |_| {})? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let view = leaks::build(&run);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::leaks::text(&view, args.limit))?;
    }
    Ok(common::status(&run))
}
