//! Per-thread state of the hot path: the re-entrancy depth and the cached thread id.
//!
//! `const` thread-locals of plain `Cell`s need no lazy registration and no destructor, so
//! they are usable while a thread starts or exits. `try_with` still covers the moments
//! when TLS is gone: such a call is forwarded and not recorded.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static TID: Cell<u32> = const { Cell::new(0) };
    static IN_PYTHON: Cell<bool> = const { Cell::new(false) };
}

/// While Python frames are read, the hook that reads them steps aside: reading can run
/// Python code (a garbage collection freeing a tensor), and a CUDA call made there is a
/// user call to record, not vramtrace's own. Such a nested call gets native frames only.
pub struct PythonCapture {
    depth: u32,
}

impl PythonCapture {
    /// `None` when this thread is already reading Python frames.
    pub fn begin() -> Option<PythonCapture> {
        let busy = IN_PYTHON.try_with(|p| p.replace(true)).unwrap_or(true);
        if busy {
            return None;
        }
        let depth = DEPTH.try_with(|d| d.replace(0)).unwrap_or(0);
        Some(PythonCapture { depth })
    }
}

impl Drop for PythonCapture {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(self.depth));
        let _ = IN_PYTHON.try_with(|p| p.set(false));
    }
}

/// Marks the thread as inside a hook until dropped.
pub struct Depth {
    entered: bool,
    /// True when this is the outermost hook on the thread: the call a user made.
    pub outermost: bool,
}

impl Depth {
    #[inline]
    pub fn enter() -> Depth {
        match DEPTH.try_with(|d| {
            let v = d.get();
            d.set(v + 1);
            v
        }) {
            Ok(v) => Depth {
                entered: true,
                outermost: v == 0,
            },
            Err(_) => Depth {
                entered: false,
                outermost: false,
            },
        }
    }
}

impl Drop for Depth {
    #[inline]
    fn drop(&mut self) {
        if self.entered {
            let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
}

/// The kernel thread id, from a syscall once per thread.
#[inline]
pub fn tid() -> u32 {
    TID.try_with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        t.set(v);
        v
    })
    // SAFETY: as above.
    .unwrap_or_else(|_| unsafe { libc::syscall(libc::SYS_gettid) } as u32)
}

/// A forked child's threads have new ids; the one thread that survives fork is reset.
pub fn reset_tid() {
    let _ = TID.try_with(|t| t.set(0));
}
