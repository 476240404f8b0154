//! The one model of PyTorch's CUDA caching allocator (the native backend of
//! c10/cuda/CUDACachingAllocator.cpp): segments, the blocks that tile them, the free
//! blocks of each pool, expandable segments' mapped pages, and the rules that size, split,
//! merge and place blocks. Every reader of a snapshot's history goes through it: `whatif`
//! lets it choose where each request goes (under any settings, on any card), the views
//! follow the recorded addresses through it (for the block sizes, the segments and the
//! fragmentation the history does not spell out). docs/allocator.md says which rules are
//! modelled.

pub mod blocks;
pub mod check;
pub mod device;
pub mod event;
pub mod expandable;
pub mod follow;
pub mod malloc;
pub mod pools;
pub mod segments;
pub mod settings;
pub mod sizes;
pub mod start;
pub mod state;

pub use device::Device;
pub use event::Event;
pub use settings::Settings;
pub use state::{Allocator, Change, SegmentInfo, SegmentView, Span, StartBlock, StartSegment};
