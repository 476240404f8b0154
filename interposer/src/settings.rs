//! Settings, read once from the environment at load time (never on the hot path, never
//! from vramtrace's own threads: the environment is the program's to change).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Frames per stack unless `VRAMTRACE_STACK_DEPTH` says otherwise.
pub const DEFAULT_STACK_DEPTH: usize = 64;

/// What `VRAMTRACE_*` variables said.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `VRAMTRACE_OUTPUT`: path pattern; `%p` pid, `%h` host, `%r` rank (`RANK`, else 0).
    /// A pattern ending in `/` names a directory. Default `vramtrace-%h-%p.jsonl`.
    pub output: String,
    /// `VRAMTRACE_CHILDREN` (default 1): trace forked and exec'd children. With 0, a
    /// forked child records nothing and the library removes itself from `LD_PRELOAD`.
    pub children: bool,
    /// `VRAMTRACE_FLUSH_MS` (default 100, 1 to 100): longest wait before events are written.
    pub flush_ms: u64,
    /// `VRAMTRACE_DISABLE=1`: load but record nothing.
    pub disabled: bool,
    /// `VRAMTRACE_STACK_DEPTH` (default 64, at most 128) return addresses per event;
    /// 0, or `VRAMTRACE_STACKS=0`, records no stacks.
    pub stack_depth: usize,
    /// `VRAMTRACE_PYTHON` (default 1): Python frames for threads that hold the GIL.
    pub python: bool,
    /// `VRAMTRACE_NVML_MS` (default 1000, at least 10; 0 off): NVML sampling interval,
    /// once the program has loaded NVML.
    pub nvml_ms: u64,
    /// `VRAMTRACE_QUEUE_MB` (default 16, at least 1): the most bytes of events waiting
    /// for the writer ([`crate::queue`], `docs/host.md`).
    pub queue_bytes: usize,
    /// `VRAMTRACE_THREAD_CHECK_MS` (internal, for tests; default and at most 50; 0: at
    /// every wake of the writer): how often the writer asks whether the program has a
    /// thread left ([`crate::last_thread`]). A test of the descriptors vramtrace's own
    /// threads open for a moment needs them opened often.
    pub thread_check_ns: u64,
    /// The variables of `ENV_KEYS` that were set, for the trace header. Read here, at
    /// load, like everything else: the header is written later on the writer thread, and
    /// `getenv` there raced with the program's own `setenv` (a crash in a few children
    /// out of 150 whose threads changed their environment).
    pub env: Vec<(String, String)>,
}

/// Megabytes of events that may wait for the writer unless `VRAMTRACE_QUEUE_MB` says
/// otherwise.
pub const DEFAULT_QUEUE_MB: usize = 16;

pub const DEFAULT_OUTPUT: &str = "vramtrace-%h-%p.jsonl";

static SETTINGS: OnceLock<Settings> = OnceLock::new();

fn flag(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => !matches!(v.trim(), "0" | "false" | "no" | "off" | ""),
        Err(_) => default,
    }
}

fn read() -> Settings {
    let output = std::env::var("VRAMTRACE_OUTPUT")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_OUTPUT.to_string());
    // Relative to the directory the program started in, even if it changes directory
    // before its first allocation.
    let output = match std::env::current_dir() {
        Ok(dir) if !output.starts_with('/') => format!("{}/{output}", dir.display()),
        _ => output,
    };
    let flush_ms = std::env::var("VRAMTRACE_FLUSH_MS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(100)
        .clamp(1, 100);
    Settings {
        output,
        children: flag("VRAMTRACE_CHILDREN", true),
        flush_ms,
        disabled: flag("VRAMTRACE_DISABLE", false),
        stack_depth: if flag("VRAMTRACE_STACKS", true) {
            std::env::var("VRAMTRACE_STACK_DEPTH")
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(DEFAULT_STACK_DEPTH)
                .min(crate::stack::MAX_DEPTH)
        } else {
            0
        },
        python: flag("VRAMTRACE_PYTHON", true),
        nvml_ms: match std::env::var("VRAMTRACE_NVML_MS")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            Some(0) => 0,
            Some(ms) => ms.max(10),
            None => 1000,
        },
        queue_bytes: std::env::var("VRAMTRACE_QUEUE_MB")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_QUEUE_MB)
            .clamp(1, 1 << 20)
            << 20,
        thread_check_ns: std::env::var("VRAMTRACE_THREAD_CHECK_MS")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(crate::last_thread::CHECK_EVERY_NS, |ms| ms * 1_000_000)
            .min(crate::last_thread::CHECK_EVERY_NS),
        env: vramtrace_schema::ENV_KEYS
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect(),
    }
}

static RECORDING: AtomicBool = AtomicBool::new(true);

/// Whether hooks record (false with `VRAMTRACE_DISABLE`, or in a forked child when child
/// tracing is off). Hooks forward either way.
#[inline]
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

pub fn stop_recording() {
    RECORDING.store(false, Ordering::Relaxed);
}

pub fn init() {
    let s = SETTINGS.get_or_init(read);
    if s.disabled {
        stop_recording();
    }
    if !s.children {
        remove_self_from_preload();
    }
}

pub fn get() -> &'static Settings {
    SETTINGS.get_or_init(read)
}

/// With child tracing off, exec'd programs must not load the interposer again.
fn remove_self_from_preload() {
    let Ok(preload) = std::env::var("LD_PRELOAD") else {
        return;
    };
    let kept: Vec<&str> = preload
        .split([':', ' '])
        .filter(|p| !p.is_empty() && !p.contains("libvramtrace"))
        .collect();
    // SAFETY: runs in the load-time constructor, before the program starts threads.
    unsafe {
        if kept.is_empty() {
            std::env::remove_var("LD_PRELOAD");
        } else {
            std::env::set_var("LD_PRELOAD", kept.join(":"));
        }
    }
}
