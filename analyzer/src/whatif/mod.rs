//! `vramtrace whatif`: a model of PyTorch's CUDA caching allocator (the native backend of
//! c10/cuda/CUDACachingAllocator.cpp), replaying a recorded stream of requests under the
//! recorded settings, other settings, or on a card of another size. docs/whatif.md says
//! which rules are modelled.

pub mod allocator;
pub mod avoid;
pub mod blocks;
pub mod check;
pub mod device;
pub mod device_layer;
pub mod expandable;
pub mod from_snapshot;
pub mod from_trace;
pub mod input;
pub mod oom;
pub mod outcome;
pub mod pools;
pub mod replay;
pub mod request;
pub mod run_dir;
pub mod search;
pub mod segments;
pub mod settings;
pub mod sizes;
pub mod source;
pub mod write;

pub use input::{Event, History};
pub use replay::{replay, Driver, Outcome};
pub use settings::Settings;
