//! `vramtrace pack -o FILE RUN...`: one compressed file of a run for a bug report.

use crate::units;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct PackArgs {
    /// The file to write (zstd-compressed tar; e.g. run.vtpack).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Take out the command line, paths and host names (docs/guide/packs.md says what changes).
    #[arg(long)]
    pub redact: bool,
    /// Replace FILE if it exists (a regular file only).
    #[arg(long)]
    pub force: bool,
    /// Trace directories or files, snapshots, torch-*.json.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
}

pub fn pack(args: PackArgs) -> Result<i32, String> {
    let packed = crate::pack::write(&args.output, &args.inputs, args.redact, args.force)?;
    let size = std::fs::metadata(&args.output)
        .map(|m| m.len())
        .unwrap_or(0);
    eprintln!(
        "vramtrace: {}: {}, {}, {} ({} read, {} written){}",
        args.output.display(),
        units::count(packed.traces as u64, "trace"),
        units::count(packed.snapshots as u64, "snapshot"),
        units::count(packed.torch_files as u64, "torch file"),
        units::bytes(packed.bytes_in),
        units::bytes(size),
        if args.redact {
            "; command lines, paths and host names taken out"
        } else {
            ""
        }
    );
    if args.redact && packed.snapshots > 0 {
        eprintln!(
            "vramtrace: {} written again with only the file names of their frames' paths (library paths from site-packages or lib/python on); not kept: record_function annotations, entries' user_metadata and compile_context, host allocator segments, allocator settings that are text",
            units::count(packed.snapshots as u64, "PyTorch snapshot")
        );
    }
    for why in &packed.left_out {
        eprintln!(
            "vramtrace: left out: {} (--redact packs only what it can take the paths out of)",
            crate::render::escape::terminal(why)
        );
    }
    eprintln!(
        "vramtrace: every view reads it as it is: vramtrace summary {}",
        args.output.display()
    );
    Ok(0)
}
