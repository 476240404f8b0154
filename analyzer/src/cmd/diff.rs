//! `vramtrace diff [--json] A B`: what changed between two runs (traces, run directories,
//! PyTorch snapshots, packs; of different kinds too).

use super::common;
use crate::render;
use crate::replay::LoadOptions;
use crate::views::diff;
use crate::views::phase_peaks::PhaseWatch;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// Changed groups listed per GPU in the text view.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Print the differential folded stacks (`stack A B`, as inferno-diff-folded writes
    /// them) instead of text.
    #[arg(long, conflicts_with = "json")]
    pub folded: bool,
    /// Also write a differential flamegraph (red: grown in B, blue: shrunk) to FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Replace the --flamegraph FILE if it exists.
    #[arg(long)]
    pub force: bool,
    /// The run compared against (a trace, a directory, a PyTorch snapshot, a pack).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The run compared.
    #[arg(value_name = "B")]
    pub b: PathBuf,
}

pub fn diff(args: DiffArgs) -> Result<i32, String> {
    if let Some(f) = &args.flamegraph {
        common::check_output(f, args.force)?;
    }
    let load = |p: &PathBuf| {
        let mut phases = PhaseWatch::default();
        let run = common::load(std::slice::from_ref(p), LoadOptions::default(), |s| {
            phases.step(s)
        })?;
        Ok::<_, String>(run.map(|run| {
            let phases = phases.finish(&run);
            (run, phases)
        }))
    };
    let (a, phases_a) = match load(&args.a)? {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let (b, phases_b) = match load(&args.b)? {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let view = diff::build(&a, &b, (&phases_a, &phases_b));
    let folded = render::flamegraph::folded_diff(&view);
    if let Some(f) = &args.flamegraph {
        let title = format!("B against A, each at its peak ({} layer)", view.layer);
        let svg = render::flamegraph::svg(&folded, &title, "nothing live in either")?;
        common::write(f, &svg, args.force)?;
    }
    if args.folded {
        let mut out = folded.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        common::print(&out)?;
    } else if args.json {
        common::print(&render::json(&view))?;
    } else {
        common::print_styled(&render::diff::text(&view, args.limit))?;
    }
    Ok(common::status(&a).max(common::status(&b)))
}
