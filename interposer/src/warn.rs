//! The one warning a process may get from vramtrace.

use std::sync::atomic::{AtomicBool, Ordering};

static WARNED: AtomicBool = AtomicBool::new(false);

/// Writes `vramtrace: warning: MSG` to stderr, once per process; later calls are dropped
/// so that a failing output never floods the program's own messages.
pub fn once(msg: &str) {
    if WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    let line = format!("vramtrace: warning: {msg}; the program runs on without tracing\n");
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// A forked child may warn on its own.
pub fn reset() {
    WARNED.store(false, Ordering::Relaxed);
}
