//! Views: what a person asks of a run, computed from the replay. Each is a plain value
//! (serialisable as the `--json` output, keys in docs/json.md); `render/` formats them.

pub mod baseline;
pub mod categories;
pub mod check;
pub mod device_split;
pub mod diff;
pub mod diff_phases;
pub mod ending;
pub mod gpu_figures;
pub mod groups;
pub mod layer;
pub mod leaks;
pub mod libraries;
pub mod marks;
pub mod moments;
pub mod oom;
mod oom_words;
pub mod peak;
pub mod phase_peaks;
pub mod plot;
pub mod preallocation;
pub mod process_name;
pub mod rank_spread;
pub mod ranks;
pub mod report;
pub mod summary;
pub mod timeline;
pub mod timeline_categories;

/// The version of every view's JSON; bumped when a key changes meaning or goes away.
pub const JSON_VERSION: u32 = 1;
pub mod memory_viz;
pub mod stacks;
