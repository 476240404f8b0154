//! Shared by the end-to-end tests and the Rust workloads: where the built artifacts
//! live, how to run a workload under `vramtrace run --sim`, how to decode its traces
//! (with the schema's reader, independently of the analyzer), and the ground truth the
//! workloads print.

pub mod fixtures;
pub mod harness;
pub mod pages;
pub mod truth;
pub mod venv;
