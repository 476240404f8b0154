//! `vramtrace`: trace a command's GPU memory, then explain it.

use clap::{CommandFactory, Parser, Subcommand};
use std::sync::LazyLock;
use vramtrace_analyzer::cmd;

/// `--version`: the release, and the trace format it writes and reads (up to that
/// version; docs/trace-format.md), which says whether a trace from another build reads.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} (trace format {})",
        env!("CARGO_PKG_VERSION"),
        vramtrace_schema::FORMAT_VERSION
    )
});

#[derive(Parser)]
#[command(
    name = "vramtrace",
    version = VERSION.as_str(),
    about = "GPU memory profiler: peak, leaks and out-of-memory post-mortems for CUDA programs"
)]
struct Cli {
    /// Show every frame of a stack, the CUDA libraries' and the allocator's too.
    #[arg(long, global = true)]
    all_frames: bool,
    /// Show whole stacks in text views, not only their top frames.
    #[arg(long, global = true)]
    full_stack: bool,
    /// The run to show from a directory that holds several (by default the newest;
    /// `unnamed`: the traces that record no run id).
    #[arg(long, global = true, value_name = "ID")]
    run: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command with every device-memory allocation traced.
    Run(cmd::run::RunArgs),
    /// Whether a run ran out of memory and who held it, its peak, its leaks; then per GPU
    /// and process.
    Summary(cmd::summary::SummaryArgs),
    /// Live bytes over time: CSV, JSON, SVG.
    Timeline(cmd::timeline::TimelineArgs),
    /// The live set at the peak, or at any moment, grouped and sorted.
    #[command(alias = "top")]
    Peak(cmd::peak::PeakArgs),
    /// What changed between two runs: peaks by layer, and the call sites that grew.
    Diff(cmd::diff::DiffArgs),
    /// Hold a run to memory limits, for CI: exit 1 naming the call site of each broken one.
    Check(cmd::check::CheckArgs),
    /// Memory never freed, grouped.
    Leaks(cmd::leaks::LeaksArgs),
    /// A post-mortem of each failed allocation.
    Oom(cmd::oom::OomArgs),
    /// One self-contained HTML report.
    Report(cmd::report::ReportArgs),
    /// Who held live memory, as a flamegraph (SVG) or folded stacks.
    Flamegraph(cmd::flamegraph::FlamegraphArgs),
    /// The run as Chrome trace JSON (Perfetto) or CSV.
    Export(cmd::export::ExportArgs),
    /// Figures of a PyTorch memory snapshot: reserved, allocated, fragmentation, OOM entries.
    Snapshot(cmd::snapshot::SnapshotArgs),
    /// One compressed file of a run (traces, snapshots, torch-*.json) for a bug report.
    Pack(cmd::pack::PackArgs),
    /// Replay a snapshot's history through a model of PyTorch's caching allocator, under
    /// other settings or on a smaller card.
    Whatif(cmd::whatif::WhatifArgs),
    /// A shell completion script, from the command line's own definition.
    Completions(cmd::completions::CompletionsArgs),
    /// The manual pages (roff), from the command line's own definition.
    Man(cmd::completions::ManArgs),
}

fn main() {
    let cli = Cli::parse();
    vramtrace_analyzer::frame_options::set(cli.all_frames, cli.full_stack);
    vramtrace_analyzer::run_id::choose(cli.run);
    let result = match cli.command {
        Command::Flamegraph(args) => cmd::flamegraph::flamegraph(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Summary(args) => cmd::summary::summary(args),
        Command::Timeline(args) => cmd::timeline::timeline(args),
        Command::Peak(args) => cmd::peak::peak(args),
        Command::Leaks(args) => cmd::leaks::leaks(args),
        Command::Diff(args) => cmd::diff::diff(args),
        Command::Check(args) => cmd::check::check(args),
        Command::Oom(args) => cmd::oom::oom(args),
        Command::Report(args) => cmd::report::report(args),
        Command::Export(args) => cmd::export::export(args),
        Command::Snapshot(args) => cmd::snapshot::snapshot(args),
        Command::Pack(args) => cmd::pack::pack(args),
        Command::Whatif(args) => cmd::whatif::whatif(args),
        Command::Completions(args) => cmd::completions::completions(Cli::command(), args),
        Command::Man(args) => cmd::completions::man(Cli::command(), args),
    };
    // process::exit runs no destructors: unpacked packs are removed here.
    vramtrace_analyzer::pack::cleanup_at_exit();
    match result {
        Ok(code) => std::process::exit(code),
        Err(msg) => {
            eprintln!(
                "vramtrace: {}",
                vramtrace_analyzer::render::escape::terminal(&msg)
            );
            std::process::exit(2);
        }
    }
}
