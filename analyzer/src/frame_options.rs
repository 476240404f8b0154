//! The command line's choice of frames (`--all-frames`, `--full-stack`), set once at start
//! and read where snapshots are read (which frames to keep) and where views show stacks.

use std::sync::atomic::{AtomicBool, Ordering};

static ALL_FRAMES: AtomicBool = AtomicBool::new(false);
static FULL_STACK: AtomicBool = AtomicBool::new(false);

/// The command line's choices, for every input and view.
pub fn set(all_frames: bool, full_stack: bool) {
    ALL_FRAMES.store(all_frames, Ordering::Relaxed);
    FULL_STACK.store(full_stack, Ordering::Relaxed);
}

/// Whether `--all-frames` was given: keep the CUDA libraries', libc's and the
/// allocator's own frames.
pub fn all_frames() -> bool {
    ALL_FRAMES.load(Ordering::Relaxed)
}

/// Whether `--full-stack` was given: every frame inline in text views.
pub fn full_stack() -> bool {
    FULL_STACK.load(Ordering::Relaxed)
}
