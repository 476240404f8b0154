//! One module per subcommand: arguments, then a view computed and rendered.

pub mod common;
pub mod export;
pub mod flamegraph;
pub mod leaks;
pub mod oom;
pub mod peak;
pub mod python_hook;
pub mod report;
pub mod run;
pub mod snapshot;
pub mod summary;
pub mod timeline;
