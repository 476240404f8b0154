//! `vramtrace_flush`: the program asks for its trace so far, to read it while it runs (the
//! pytest plugin checks each test's peak this way). Everything recorded before the call
//! is written; the trace's path is handed back. Not for a signal handler (it takes the
//! writer's lock).
#![allow(clippy::missing_safety_doc)]

use crate::writer;
use std::ffi::c_char;

/// Writes everything recorded so far, then copies the trace's path, NUL-terminated, into
/// `path` (`len` bytes; may be NULL with `len` 0). Returns the path's length without the
/// NUL (larger than `len - 1`: the path did not fit and nothing was copied), 0 when there
/// is no trace file (nothing recorded yet), -1 when the trace could not be written.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn vramtrace_flush(path: *mut c_char, len: usize) -> isize {
    if writer::holding() {
        // Called from inside the writer (a signal handler of the program's, say): the
        // writer cannot be taken again here.
        return -1;
    }
    let found = std::panic::catch_unwind(writer::flush_to_now);
    match found {
        Ok(Some(Ok(p))) => {
            if !path.is_null() && p.len() < len {
                // SAFETY: the caller gave `len` writable bytes at `path`; p.len() + 1 <= len.
                std::ptr::copy_nonoverlapping(p.as_ptr(), path as *mut u8, p.len());
                *path.add(p.len()) = 0;
            }
            p.len() as isize
        }
        Ok(None) => 0,
        Ok(Some(Err(()))) | Err(_) => -1,
    }
}
