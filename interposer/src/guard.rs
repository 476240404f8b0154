//! Per-thread state of the hot path: the re-entrancy depth and the cached thread id.
//!
//! `const` thread-locals of plain `Cell`s need no lazy registration and no destructor, so
//! they are usable while a thread starts or exits. `try_with` still covers the moments
//! when TLS is gone: such a call is forwarded and not recorded.

use std::cell::Cell;

/// One thread-local for the whole hot path: in a shared library every access to a
/// thread-local is a call to `__tls_get_addr`, so a hook finds this once and keeps a
/// pointer to it for the rest of the call.
struct Hot {
    depth: Cell<u32>,
    tid: Cell<u32>,
    in_python: Cell<bool>,
}

thread_local! {
    static HOT: Hot = const {
        Hot {
            depth: Cell::new(0),
            tid: Cell::new(0),
            in_python: Cell::new(false),
        }
    };
}

/// This thread's [`Hot`]: a `const` thread-local without a destructor, so it stays valid
/// until the thread ends, longer than any hook call that holds the pointer.
#[inline]
fn hot() -> Option<*const Hot> {
    HOT.try_with(|h| h as *const Hot).ok()
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
        let busy = HOT.try_with(|h| h.in_python.replace(true)).unwrap_or(true);
        if busy {
            return None;
        }
        let depth = HOT.try_with(|h| h.depth.replace(0)).unwrap_or(0);
        Some(PythonCapture { depth })
    }
}

impl Drop for PythonCapture {
    fn drop(&mut self) {
        let _ = HOT.try_with(|h| {
            h.depth.set(self.depth);
            h.in_python.set(false);
        });
    }
}

/// Marks the thread as inside a hook until dropped.
pub struct Depth {
    /// This thread's state; `None` when thread-locals are gone (thread teardown).
    hot: Option<*const Hot>,
    /// True when this is the outermost hook on the thread: the call a user made.
    pub outermost: bool,
}

impl Depth {
    #[inline]
    pub fn enter() -> Depth {
        let hot = hot();
        let mut outermost = false;
        if let Some(h) = hot {
            // SAFETY: see `hot`.
            let depth = unsafe { &(*h).depth };
            outermost = depth.get() == 0;
            depth.set(depth.get() + 1);
        }
        Depth { hot, outermost }
    }

    /// The kernel thread id of the caller.
    #[inline]
    pub fn tid(&self) -> u32 {
        match self.hot {
            // SAFETY: see `hot`.
            Some(h) => thread_id(unsafe { &(*h).tid }),
            None => gettid(),
        }
    }
}

impl Drop for Depth {
    #[inline]
    fn drop(&mut self) {
        if let Some(h) = self.hot {
            // SAFETY: see `hot`.
            let depth = unsafe { &(*h).depth };
            depth.set(depth.get().saturating_sub(1));
        }
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The kernel thread id, from a syscall once per thread.
#[inline]
fn thread_id(cached: &Cell<u32>) -> u32 {
    let v = cached.get();
    if v != 0 {
        return v;
    }
    let v = gettid();
    cached.set(v);
    v
}

/// The kernel thread id of the caller, outside a hook.
pub fn tid() -> u32 {
    HOT.try_with(|h| thread_id(&h.tid))
        .unwrap_or_else(|_| gettid())
}

/// A forked child's threads have new ids; the one thread that survives fork is reset.
pub fn reset_tid() {
    let _ = HOT.try_with(|h| h.tid.set(0));
}
