//! The warnings a process may get from vramtrace: one when tracing stops, and one per
//! kind of data it cannot have.

use std::sync::atomic::{AtomicBool, Ordering};

static WARNED: AtomicBool = AtomicBool::new(false);

/// Writes `vramtrace: warning: MSG` to stderr, once per process; later calls are dropped
/// so that a failing output never floods the program's own messages.
pub fn once(msg: &str) {
    once_for(
        &WARNED,
        &format!("{msg}; the program runs on without tracing"),
    );
}

/// A forked child may warn on its own.
pub fn reset() {
    WARNED.store(false, Ordering::Relaxed);
}

/// Writes `vramtrace: warning: MSG` to stderr once per `flag`: for a loss that leaves the
/// trace running (what [`once`] says), such as one kind of data that cannot be had.
pub fn once_for(flag: &AtomicBool, msg: &str) {
    if flag.swap(true, Ordering::Relaxed) {
        return;
    }
    let line = format!("vramtrace: warning: {msg}\n");
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}
