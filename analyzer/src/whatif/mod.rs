//! `vramtrace whatif`: a recorded stream of requests replayed through the allocator model
//! (`crate::allocator`), which chooses where each goes, under the recorded settings,
//! other settings, or on a card of another size. docs/whatif.md says what it answers.

pub mod avoid;
pub mod device;
pub mod device_layer;
pub mod from_snapshot;
pub mod from_trace;
pub mod input;
pub mod outcome;
pub mod replay;
pub mod request;
pub mod run_dir;
pub mod search;
pub mod source;
pub mod write;

pub use crate::allocator::{Device, Settings};
pub use input::{Event, History};
pub use replay::{replay, Driver, Outcome};
