//! One module per subcommand: arguments, then a view computed and rendered.

pub mod check;
pub mod common;
pub mod completions;
pub mod diff;
pub mod export;
mod export_parquet;
pub mod flamegraph;
pub mod leaks;
pub mod oom;
pub mod pack;
pub mod peak;
pub mod python_hook;
pub mod report;
pub mod run;
pub mod run_child;
pub mod snapshot;
pub mod summary;
pub mod timeline;
pub mod whatif;
pub mod whatif_oom;
mod whatif_render;
