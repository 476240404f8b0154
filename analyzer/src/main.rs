//! `vramtrace`: trace a command's GPU memory, then explain it.

use clap::{Parser, Subcommand};
use vramtrace_analyzer::cmd;

#[derive(Parser)]
#[command(
    name = "vramtrace",
    version,
    about = "GPU memory profiler: peak, leaks and out-of-memory post-mortems for CUDA programs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command with every device-memory allocation traced.
    Run(cmd::run::RunArgs),
    /// Peak, leaks and failed allocations of a run, per process and device.
    Summary(cmd::summary::SummaryArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd::run::run(args),
        Command::Summary(args) => cmd::summary::summary(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(msg) => {
            eprintln!("vramtrace: {msg}");
            std::process::exit(2);
        }
    }
}
