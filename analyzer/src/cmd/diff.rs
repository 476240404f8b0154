//! `vramtrace diff [--json] A B`: what changed between two runs (traces, run directories,
//! PyTorch snapshots, packs; of different kinds too).

use super::common;
use crate::render;
use crate::run::LoadOptions;
use crate::views::diff;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// Changed groups listed per GPU in the text view.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// The run compared against (a trace, a directory, a PyTorch snapshot, a pack).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The run compared.
    #[arg(value_name = "B")]
    pub b: PathBuf,
}

pub fn diff(args: DiffArgs) -> Result<i32, String> {
    let load = |p: &PathBuf| common::load(std::slice::from_ref(p), LoadOptions::default(), |_| {});
    let a = match load(&args.a)? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let b = match load(&args.b)? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    let view = diff::build(&a, &b);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::diff::text(&view, args.limit))?;
    }
    Ok(common::status(&a).max(common::status(&b)))
}
