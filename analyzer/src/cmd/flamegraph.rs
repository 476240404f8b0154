//! `vramtrace flamegraph [-o FILE] [--at TIME | --leaks] [--folded] TRACE|DIR...`:
//! who held the bytes live at the peak (or at a moment, or never freed), as a flamegraph
//! (SVG, to vramtrace-flamegraph.svg by default) or folded stacks (to stdout by default).

use super::common;
use crate::render::flamegraph;
use crate::replay::LoadOptions;
use crate::views::layer::{self, Layer};
use crate::views::{leaks, peak};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FlamegraphArgs {
    /// Output file (`-` for stdout). Default: vramtrace-flamegraph.svg, and stdout with
    /// `--folded`.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The bytes live at this moment (time since the run's start) instead of at the peak.
    #[arg(long, value_name = "TIME", value_parser = common::duration, conflicts_with = "leaks")]
    pub at: Option<u64>,
    /// The bytes never freed.
    #[arg(long)]
    pub leaks: bool,
    /// Write folded-stack text (`frame;frame;... bytes`) for other flamegraph tools.
    #[arg(long)]
    pub folded: bool,
    /// The layer: `allocated` (tensors, where an allocator or a PyTorch snapshot tells
    /// them; the default there) or `reserved` (device memory from the driver).
    #[arg(long, value_enum)]
    pub layer: Option<Layer>,
    /// Replace FILE if it exists (vramtrace otherwise never writes over a file).
    #[arg(long)]
    pub force: bool,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

pub fn flamegraph(args: FlamegraphArgs) -> Result<i32, String> {
    // Folded text is for other tools' pipes; an SVG for a browser.
    let output = match (&args.output, args.folded) {
        (Some(path), _) => path.clone(),
        (None, true) => PathBuf::from("-"),
        (None, false) => PathBuf::from("vramtrace-flamegraph.svg"),
    };
    common::check_output(&output, args.force)?;
    let run = match common::load(
        &args.paths,
        LoadOptions {
            until: args.at,
            ..Default::default()
        },
        |_| {},
    )? {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_past_end(&run, args.at);
    common::warn_no_tensors(&run, args.layer);
    let (lines, title, nothing) = if args.leaks {
        let view = leaks::build_at(&run, args.layer);
        let layer = Layer::of(&run, args.layer);
        let groups = match layer {
            Layer::Allocated => &view.tensor_groups,
            Layer::Reserved => &view.groups,
        };
        let title = format!("Never freed: {}", layer::describe(layer));
        (flamegraph::folded_leaks(groups), title, "nothing leaked")
    } else {
        let view = peak::build(&run, args.at, args.layer);
        // Each device answers at its own layer (tensors where it has them): the title
        // names them all.
        let mut shown: Vec<&str> = view.devices.iter().map(|d| d.layer).collect();
        shown.sort_unstable();
        shown.dedup();
        let what = match shown[..] {
            ["allocated"] => layer::describe(Layer::Allocated),
            ["reserved"] | [] => layer::describe(Layer::Reserved),
            _ => "tensors (allocated layer, requested bytes) where known, else device memory (reserved layer)",
        };
        let when = match args.at {
            Some(t) => format!("at {}", crate::units::seconds(t)),
            None => "at the peak".to_string(),
        };
        let title = format!("Live {when}: {what}");
        (flamegraph::folded_peak(&view), title, "nothing live")
    };
    let content = if args.folded {
        lines.iter().map(|l| format!("{l}\n")).collect()
    } else {
        flamegraph::svg(&lines, &title, nothing)?
    };
    common::write(&output, &content, args.force)?;
    if output != std::path::Path::new("-") {
        eprintln!("vramtrace: wrote {}", output.display());
    }
    Ok(common::status(&run))
}
