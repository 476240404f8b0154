//! `vramtrace oom [--json] TRACE|DIR...`: a post-mortem of each failed allocation.

use super::common;
use crate::render;
use crate::views::oom::OomWatch;
use crate::views::preallocation::{self, PreallocationWatch};
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
    let mut preallocations = PreallocationWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| {
        watch.step(s);
        preallocations.step(s);
    })? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let mut view = watch.finish(&run);
    let found = preallocations.finish(&run);
    for f in &mut view.failures {
        if let Some(p) = preallocation::of(&found, f.pid, f.device) {
            f.advice.insert(0, p.advice());
        }
    }
    super::whatif_oom::add_avoided_by(&run, &mut view.failures);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::oom::text(&view))?;
    }
    Ok(common::status(&run))
}
