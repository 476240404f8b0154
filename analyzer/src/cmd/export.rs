//! `vramtrace export --format perfetto|csv [-o FILE] TRACE|DIR...`: the whole run as
//! Chrome trace JSON (Perfetto) or as one CSV row per event, streamed as it is replayed.

use super::common;
use crate::render::csv::EventCsv;
use crate::render::perfetto::PerfettoWriter;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Format {
    /// Chrome trace JSON: open in ui.perfetto.dev.
    Perfetto,
    /// One row per event.
    Csv,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    #[arg(long, value_enum)]
    pub format: Format,
    /// Output file (default: stdout).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

/// Ends an export once the run is loaded.
type Finish = Box<dyn FnOnce(&crate::run::Run) -> std::io::Result<()>>;

pub fn export(args: ExportArgs) -> Result<i32, String> {
    let out: Box<dyn Write> = match &args.output {
        Some(p) if p.as_os_str() != "-" => {
            Box::new(File::create(p).map_err(|e| format!("{}: cannot create: {e}", p.display()))?)
        }
        _ => Box::new(std::io::stdout().lock()),
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
        Format::Csv => {
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
    if let Some(e) = error {
        return Err(io(e));
    }
    finish(&run).map_err(io)?;
    Ok(common::status(&run))
}
