//! `vramtrace export --format perfetto|csv|memory-viz|parquet [-o FILE|DIR] TRACE|DIR...`:
//! the whole run as Chrome trace JSON (Perfetto), one CSV row per event (both streamed as
//! the run is replayed), a PyTorch memory snapshot for pytorch.org/memory_viz, or typed
//! tables in a Parquet dataset ([`super::export_parquet`]).

use super::common;
use crate::render::csv::EventCsv;
use crate::render::perfetto::PerfettoWriter;
use crate::snapshot::write::memory_viz_bytes;
use crate::views::layer::Layer;
use crate::views::memory_viz::{MemoryVizBuilder, DEFAULT_MAX_ENTRIES};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Format {
    /// Chrome trace JSON: open in ui.perfetto.dev.
    Perfetto,
    /// One row per event.
    Csv,
    /// A PyTorch memory snapshot pickle: open in pytorch.org/memory_viz.
    MemoryViz,
    /// Typed tables (events, processes, devices, failures, stacks, frames, GPUs) in a
    /// Parquet dataset partitioned by run and rank, for DuckDB, Polars or Spark: `-o DIR`.
    Parquet,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    #[arg(long, value_enum)]
    pub format: Format,
    /// Output file (default: stdout); with `--format parquet`, the dataset's directory,
    /// made if need be, to which each export adds its runs.
    #[arg(short, long, value_name = "FILE|DIR")]
    pub output: Option<PathBuf>,
    /// With `--format memory-viz`, the blocks inside segments: `allocated` (tensors,
    /// where an allocator or a PyTorch snapshot tells them; the default there) or
    /// `reserved` (each device allocation one block). The Perfetto and CSV exports hold
    /// every event of both layers, each naming its API.
    #[arg(long, value_enum)]
    pub layer: Option<Layer>,
    /// Replace FILE if it exists (vramtrace otherwise never writes over a file); with
    /// `--format parquet`, the files of a run exported there before.
    #[arg(long)]
    pub force: bool,
    /// memory-viz: trace entries kept per device, the newest (0 keeps them all; the
    /// browser viewer slows down past about 100,000).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_ENTRIES)]
    pub max_entries: usize,
    /// Trace files, directories of traces, or PyTorch snapshots (`--format parquet`: each
    /// one a run of its own).
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

/// Ends an export once the run is loaded.
type Finish = Box<dyn FnOnce(&crate::replay::Run) -> std::io::Result<()>>;

pub fn export(args: ExportArgs) -> Result<i32, String> {
    if args.layer.is_some() && !matches!(args.format, Format::MemoryViz) {
        return Err(
            "--layer applies to --format memory-viz: the Perfetto and CSV exports hold both layers' events, each naming its API".into(),
        );
    }
    if let Format::Parquet = args.format {
        let Some(root) = args.output.as_ref().filter(|p| p.as_os_str() != "-") else {
            return Err("--format parquet writes a dataset directory: name it with -o DIR".into());
        };
        return super::export_parquet::export(root, &args.paths, args.force);
    }
    // Sendable: the CSV rows are written on a thread of their own.
    let out: Box<dyn Write + Send> = match &args.output {
        Some(p) if p.as_os_str() != "-" => Box::new(crate::output_file::create(p, args.force)?),
        _ => Box::new(std::io::stdout()),
    };
    let out = BufWriter::with_capacity(1 << 20, out);
    let io = |e: std::io::Error| format!("cannot write the export: {e}");
    let mut error = None;
    let (run, finish): (_, Finish) = match args.format {
        Format::Perfetto => {
            let mut w = PerfettoWriter::new(out).map_err(io)?;
            let run = common::load(&args.paths, Default::default(), |s| {
                if error.is_none() {
                    error = w.step(s).err();
                }
            })?;
            (run, Box::new(move |r| w.finish(r)))
        }
        Format::MemoryViz => {
            let layer = args.layer.unwrap_or(Layer::Allocated);
            let mut builder = MemoryVizBuilder::at_layer(args.max_entries, layer);
            let run = common::load(&args.paths, Default::default(), |s| builder.step(s))?;
            let mut out = out;
            (
                run,
                Box::new(move |r| {
                    for line in kept_lines(&builder.entry_counts()) {
                        eprintln!("vramtrace: {line}");
                    }
                    let bytes = memory_viz_bytes(&builder.finish(r));
                    out.write_all(&bytes)?;
                    out.flush()
                }),
            )
        }
        Format::Csv | Format::Parquet => {
            let mut w = EventCsv::new(out).map_err(io)?;
            let run = common::load(&args.paths, Default::default(), |s| {
                if error.is_none() {
                    error = w.step(s).err();
                }
            })?;
            (run, Box::new(move |_| w.finish()))
        }
    };
    let run = match run {
        Ok(run) => run,
        Err(code) => return Ok(code),
    };
    common::warn_no_tensors(&run, args.layer);
    if let Some(e) = error {
        return Err(io(e));
    }
    finish(&run).map_err(io)?;
    Ok(common::status(&run))
}

/// What the memory-viz export kept of each device's history: one line per device.
fn kept_lines(counts: &[(i32, usize, u64)]) -> Vec<String> {
    let entries = |n: u64| format!("{n} trace {}", if n == 1 { "entry" } else { "entries" });
    counts
        .iter()
        .map(|&(dev, kept, dropped)| {
            let total = kept as u64 + dropped;
            if dropped == 0 {
                format!("memory-viz: device {dev}: kept all {}", entries(total))
            } else {
                format!(
                    "memory-viz: device {dev}: kept the newest {} of {total}, left out the oldest {dropped} (--max-entries 0 keeps them all)",
                    entries(kept as u64),
                )
            }
        })
        .collect()
}
