//! PyTorch memory snapshots: a data-only pickle reader, the snapshot model, its figures
//! at the end (reserved, allocated, requested, fragmentation), its history as events
//! followed through the allocator model (crate::allocator) that every view reads, and a
//! writer for pytorch.org/memory_viz.

pub mod allocator_input;
mod annotations;
pub mod category;
pub mod device_history;
pub mod events;
pub mod figures;
pub mod frames;
pub mod history;
pub mod labels;
pub mod model;
pub mod names;
pub mod pickle;
pub mod read;
pub mod stack_ids;
mod start_events;
pub mod write;

pub use figures::{figures, Figures};
pub use model::{
    Action, Annotation, Block, BlockState, DeviceSnapshot, Frame, Frames, Generation, Segment,
    Snapshot, TraceEntry,
};
pub use read::{parse_snapshot, read_snapshot};
pub use write::{memory_viz_bytes, write_memory_viz};
