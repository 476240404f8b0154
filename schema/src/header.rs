//! The header: line 1 of every trace.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const FORMAT_NAME: &str = "vramtrace";
/// The version this crate writes. Readers accept every version up to it.
pub const FORMAT_VERSION: u32 = 1;

/// The only environment variables that may appear in a trace. Anything else in the
/// environment (tokens, paths, user names) stays out of files people attach to bug reports.
pub const ENV_KEYS: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    // Which run a process belongs to: set by `vramtrace run`, or the launcher's job id.
    "VRAMTRACE_RUN_ID",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
];

/// Who wrote the trace, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    pub version: u32,
    pub pid: u32,
    pub ppid: u32,
    pub host: String,
    /// The command line, with the values of secret-looking options replaced
    /// ([`crate::redact`]) whenever a header is written or read: a secret never reaches
    /// a trace, and one in an older trace reaches no view.
    #[serde(
        serialize_with = "crate::redact::serialize",
        deserialize_with = "crate::redact::deserialize"
    )]
    pub argv: Vec<String>,
    /// The executable image (`/proc/self/exe`).
    pub exe: String,
    /// Wall clock (ns since the Unix epoch) at the monotonic origin.
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC (ns) that event times count from; shared by every process on a host.
    pub start_mono_ns: u64,
    /// Values of the [`ENV_KEYS`] that were set.
    pub env: BTreeMap<String, String>,
    pub settings: Settings,
    /// Version of the interposer that wrote the trace.
    pub interposer: String,
}

/// The interposer's own settings, as it read them from its environment variables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// `VRAMTRACE_OUTPUT`: the output path pattern.
    pub output: String,
    /// `VRAMTRACE_CHILDREN`: whether forked and exec'd children are traced.
    pub children: bool,
    /// `VRAMTRACE_FLUSH_MS`: the longest time an event waits before it is written.
    pub flush_ms: u64,
    /// `VRAMTRACE_STACK_DEPTH`: return addresses recorded per event (0: stacks off).
    #[serde(default)]
    pub stack_depth: u32,
    /// `VRAMTRACE_PYTHON`: Python frames recorded (threads with or without the GIL).
    #[serde(default)]
    pub python: bool,
}
