//! PyTorch memory snapshots: a data-only pickle reader, the snapshot model, its figures
//! (reserved, allocated, requested, fragmentation), a timeline anchored at the snapshot,
//! and a writer for pytorch.org/memory_viz.

pub mod block_sizes;
pub mod events;
pub mod figures;
pub mod frames;
pub mod history;
pub mod model;
pub mod pickle;
pub mod read;
pub mod rewind;
pub mod timeline;
pub mod write;

pub use figures::{figures, Figures};
pub use model::{
    Action, Block, BlockState, DeviceSnapshot, Frame, Generation, Segment, Snapshot, TraceEntry,
};
pub use read::{parse_snapshot, read_snapshot};
pub use write::{memory_viz_bytes, write_memory_viz};
