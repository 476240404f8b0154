//! `vramtrace leaks [--json] TRACE|DIR...`: what was never freed, grouped.

use super::common;
use crate::render;
use crate::views::layer::Layer;
use crate::views::leaks;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct LeaksArgs {
    /// Groups listed in the text view.
    #[arg(long, default_value_t = 30)]
    pub limit: usize,
    /// The layer: `allocated` (tensors never freed, where an allocator or a PyTorch
    /// snapshot tells them; the default there) or `reserved` (device memory never freed).
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

pub fn leaks(args: LeaksArgs) -> Result<i32, String> {
    let run = match common::load(&args.paths, Default::default(), |_| {})? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_no_tensors(&run, args.layer);
    let view = leaks::build_at(&run, args.layer);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::leaks::text(&view, args.limit))?;
    }
    Ok(common::status(&run))
}
