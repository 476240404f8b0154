//! `vramtrace run [options] CMD...`: runs a command with the interposer preloaded.

use super::common;
use super::run_child::{self, Forwarding};
use crate::units;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Directory for the traces (one file per process). Default: vramtrace-<date>-<time>/
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Run against vramtrace's simulated CUDA stack (no GPU needed).
    #[arg(long)]
    pub sim: bool,
    /// Memory of each simulated device, e.g. 80GiB (with --sim).
    #[arg(long, value_name = "SIZE", requires = "sim")]
    pub sim_capacity: Option<String>,
    /// Number of simulated devices (with --sim).
    #[arg(long, value_name = "N", requires = "sim")]
    pub sim_devices: Option<u32>,
    /// Do not trace forked or exec'd children.
    #[arg(long)]
    pub no_children: bool,
    /// Longest time, in ms (1-100), an event waits before it is written.
    #[arg(long, value_name = "MS")]
    pub flush_ms: Option<u64>,
    /// Return addresses recorded per event (default 64, at most 128).
    #[arg(long, value_name = "N")]
    pub stack_depth: Option<u32>,
    /// Record no call stacks.
    #[arg(long, conflicts_with = "stack_depth")]
    pub no_stacks: bool,
    /// Record no Python frames (native frames only).
    #[arg(long)]
    pub no_python: bool,
    /// Do not add the PyTorch startup hook (memory history and snapshots) to Python commands.
    #[arg(long)]
    pub no_torch: bool,
    /// The command to run, after vramtrace's own options (`--` before it is optional).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()?
        .parent()
        .map(Path::to_path_buf)
}

/// The interposer: `VRAMTRACE_LIB`, or `libvramtrace.so` beside this binary or in `../lib`.
pub fn find_interposer() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("VRAMTRACE_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("VRAMTRACE_LIB={} is not a file", p.display()))
        };
    }
    let dir = exe_dir().ok_or("cannot locate the vramtrace binary")?;
    let candidates = [
        dir.join("libvramtrace.so"),
        dir.join("../lib/libvramtrace.so"),
    ];
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "cannot find the interposer libvramtrace.so: looked at {}; build it with `cargo build --release` or set VRAMTRACE_LIB",
            candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and ")
        )
    })
}

/// The simulated CUDA stack: `VRAMTRACE_SIM_DIR`, or `sim/` beside this binary.
fn find_sim() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("VRAMTRACE_SIM_DIR") {
        Some(d) => PathBuf::from(d),
        None => exe_dir()
            .ok_or("cannot locate the vramtrace binary")?
            .join("sim"),
    };
    if dir.join("libcuda.so.1").is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "cannot find the simulated CUDA stack: no libcuda.so.1 in {}; build it with `cargo build --release` or set VRAMTRACE_SIM_DIR",
            dir.display()
        ))
    }
}

fn default_output() -> PathBuf {
    PathBuf::from(format!("vramtrace-{}", crate::run_id::local_stamp()))
}

/// Runs the command; returns the exit code vramtrace itself should end with.
pub fn run(args: RunArgs) -> Result<i32, String> {
    let lib = find_interposer()?;
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    let out_dir = args.output.clone().unwrap_or_else(default_output);
    // A directory vramtrace chose and made itself is removed again if no trace lands in it.
    let made_here = args.output.is_none() && !out_dir.exists();
    std::fs::create_dir_all(&out_dir).map_err(|e| {
        format!(
            "cannot create the output directory {}: {e}",
            out_dir.display()
        )
    })?;
    let out_dir = std::fs::canonicalize(&out_dir).unwrap_or(out_dir);
    let run_id = crate::run_id::for_new_run();
    crate::run_id::warn_if_other_run(&out_dir, &run_id);

    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    cmd.env(
        "LD_PRELOAD",
        common::prepend("LD_PRELOAD", &lib.to_string_lossy()),
    );
    cmd.env(
        "VRAMTRACE_OUTPUT",
        format!("{}/vramtrace-%h-%p.jsonl", out_dir.display()),
    );
    cmd.env("VRAMTRACE_RUN_ID", &run_id);
    // The command that reads the traces, for the program's own checks while it runs
    // (the pytest plugin's `vramtrace check --phase`).
    if let Ok(me) = std::env::current_exe() {
        cmd.env("VRAMTRACE_BIN", me);
    }
    if args.no_children {
        cmd.env("VRAMTRACE_CHILDREN", "0");
    }
    if let Some(ms) = args.flush_ms {
        cmd.env("VRAMTRACE_FLUSH_MS", ms.to_string());
    }
    if let Some(depth) = args.stack_depth {
        cmd.env("VRAMTRACE_STACK_DEPTH", depth.to_string());
    }
    if args.no_stacks {
        cmd.env("VRAMTRACE_STACKS", "0");
    }
    if args.no_python {
        cmd.env("VRAMTRACE_PYTHON", "0");
    }
    if args.sim {
        let sim = find_sim()?;
        cmd.env(
            "LD_LIBRARY_PATH",
            common::prepend("LD_LIBRARY_PATH", &sim.to_string_lossy()),
        );
        if let Some(c) = &args.sim_capacity {
            // A card of no memory fails the program's first CUDA call, with no trace.
            let bytes = units::parse_size(c)?;
            if bytes == 0 {
                return Err(format!(
                    "--sim-capacity {c:?}: a simulated device needs some memory, e.g. 24GiB"
                ));
            }
            cmd.env("VRAMTRACE_SIM_CAPACITY", bytes.to_string());
        }
        if let Some(n) = args.sim_devices {
            cmd.env("VRAMTRACE_SIM_DEVICES", n.to_string());
        }
    }

    let _hook = (!args.no_torch).then(|| super::python_hook::install(&mut cmd, &args.command));
    let forwarding = Forwarding::block(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let (message, code) = run_child::not_started(&args.command[0], &e);
            eprintln!("vramtrace: {}: {message}", args.command[0]);
            return Ok(code);
        }
    };
    forwarding.start(child.id());
    run_child::wait_for_end(child.id());
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", args.command[0]))?;
    let traces = std::fs::read_dir(&out_dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
                .count()
        })
        .unwrap_or(0);
    // remove_dir removes only an empty directory: one holding the hook's files stays.
    let removed = traces == 0 && made_here && std::fs::remove_dir(&out_dir).is_ok();
    eprintln!(
        "vramtrace: {} {}; {} in {}{}",
        args.command[0],
        describe(status),
        crate::units::count(traces as u64, "trace file"),
        out_dir.display(),
        if removed { " (removed, empty)" } else { "" },
    );
    if traces > 0 {
        eprintln!("vramtrace: see `vramtrace summary {}`", out_dir.display());
    } else if args.sim {
        eprintln!("vramtrace: {NO_CUDA_CALL}");
    } else {
        eprintln!("vramtrace: {}", why_no_trace());
    }
    Ok(exit_code(status))
}

const NO_CUDA_CALL: &str = "the command made no CUDA call, so no process left a trace";

/// Why a run left no trace: the interposer writes one only once CUDA is called.
fn why_no_trace() -> String {
    // SAFETY: loading NVIDIA's driver library runs no code of the traced program; it is
    // unloaded when the handle drops.
    match unsafe { libloading::Library::new("libcuda.so.1") } {
        Err(e) => format!(
            "no NVIDIA driver could be loaded here ({e}), so nothing reached a GPU; to try vramtrace without one: vramtrace run --sim CMD"
        ),
        Ok(_) => NO_CUDA_CALL.to_string(),
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".into(),
    }
}

/// The command's status, or 128+N after signal N, as a shell reports it.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
