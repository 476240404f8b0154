//! The vramtrace analyzer: reads traces, replays them into a model of memory over time,
//! and renders views of it. The `vramtrace` binary is a thin command line over this.

pub mod allocator;
pub mod cmd;
pub mod errors;
pub mod frame_options;
pub mod input;
pub mod model;
pub mod output_file;
pub mod pack;
pub mod regular_file;
pub mod render;
pub mod replay;
pub mod run_id;
pub mod snapshot;
pub mod units;
pub mod views;
pub mod whatif;
