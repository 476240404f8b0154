//! `vramtrace oom [--json] TRACE|DIR...`: a post-mortem of each failed allocation.

use super::common;
use crate::render;
use crate::views::layer::Layer;
use crate::views::oom::OomWatch;
use crate::views::preallocation::{self, PreallocationWatch};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct OomArgs {
    /// The layer: `allocated` (the live tensors at each failure, where an allocator or a
    /// PyTorch snapshot tells them; the default there) or `reserved` (device memory held).
    /// Without it, the text lists the other layer too.
    #[arg(long, value_enum)]
    pub layer: Option<Layer>,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files, directories of traces, or PyTorch snapshots.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn oom(args: OomArgs) -> Result<i32, String> {
    let mut watch = OomWatch::at_layer(args.layer);
    let mut preallocations = PreallocationWatch::default();
    let run = match common::load(&args.paths, Default::default(), |s| {
        watch.step(s);
        preallocations.step(s);
    })? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_no_tensors(&run, args.layer);
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
