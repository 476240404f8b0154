//! `vramtrace flamegraph [-o FILE.svg] [--at TIME | --leaks] [--folded] TRACE|DIR...`:
//! who held the bytes live at the peak (or at a moment, or never freed), as a flamegraph.

use super::common;
use crate::render::flamegraph;
use crate::run::LoadOptions;
use crate::views::{leaks, peak};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FlamegraphArgs {
    /// Output file (`-` for stdout).
    #[arg(short, long, default_value = "vramtrace-flamegraph.svg")]
    pub output: PathBuf,
    /// The bytes live at this moment (time since the run's start) instead of at the peak.
    #[arg(long, value_name = "TIME", value_parser = common::duration, conflicts_with = "leaks")]
    pub at: Option<u64>,
    /// The bytes never freed.
    #[arg(long)]
    pub leaks: bool,
    /// Write folded-stack text (`frame;frame;... bytes`) for other flamegraph tools.
    #[arg(long)]
    pub folded: bool,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn flamegraph(args: FlamegraphArgs) -> Result<i32, String> {
    let run = match common::load(&args.paths, LoadOptions { until: args.at }, |_| {})? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_past_end(&run, args.at);
    let (lines, title) = if args.leaks {
        (
            flamegraph::folded_leaks(&leaks::build(&run)),
            "Device memory never freed".to_string(),
        )
    } else {
        let title = match args.at {
            Some(t) => format!("Device memory live at {}", crate::units::seconds(t)),
            None => "Device memory live at the peak".to_string(),
        };
        (flamegraph::folded_peak(&peak::build(&run, args.at)), title)
    };
    let content = if args.folded {
        lines.iter().map(|l| format!("{l}\n")).collect()
    } else {
        flamegraph::svg(&lines, &title)?
    };
    common::write(&args.output, &content)?;
    if args.output != std::path::Path::new("-") {
        eprintln!("vramtrace: wrote {}", args.output.display());
    }
    Ok(common::status(&run))
}
