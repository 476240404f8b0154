//! `vramtrace peak [--at TIME] [--json] TRACE|DIR...` (alias `top`): the live set at each
//! device's peak, or at any moment, grouped and sorted.

use super::common;
use crate::render;
use crate::replay::LoadOptions;
use crate::views::peak;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct PeakArgs {
    /// A moment, as time since the run's start (e.g. 12.5, 12.5s, 300ms): the live set
    /// then, instead of at the peak.
    #[arg(long, value_name = "TIME", value_parser = common::duration)]
    pub at: Option<u64>,
    /// Groups listed per device in the text view.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// What the text lists the live set by: `group` (who allocated), `category` (what
    /// the tensors were for: parameters, gradients, optimizer state, activations) or
    /// `label` (a snapshot's `user_metadata` and private pools).
    #[arg(long, value_enum, default_value_t = render::peak::By::Group)]
    pub by: render::peak::By,
    /// The layer: `allocated` (tensors, where an allocator or a PyTorch snapshot tells
    /// them; the default there) or `reserved` (device memory from the driver).
    #[arg(long, value_enum)]
    pub layer: Option<peak::Layer>,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files, directories of traces, or PyTorch snapshots.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn peak(args: PeakArgs) -> Result<i32, String> {
    let options = LoadOptions {
        until: args.at,
        ..Default::default()
    };
    let run = match common::load(&args.paths, options, |_| {})? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_past_end(&run, args.at);
    common::warn_no_tensors(&run, args.layer);
    let view = peak::build(&run, args.at, args.layer);
    if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print(&render::peak::text(&view, args.limit, args.by))?;
    }
    Ok(common::status(&run))
}
