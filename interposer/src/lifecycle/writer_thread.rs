//! The writer's own thread: started by the process's first event, it flushes every
//! interval (sooner when a shard fills), ends the process when only vramtrace's threads
//! are left, and polls NVML.

use super::{no_writer_thread, writer_thread_may_flush};
use crate::{settings, writer};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

static THREAD_STARTED: AtomicBool = AtomicBool::new(false);
static FIRST_FLUSHED: AtomicBool = AtomicBool::new(false);
/// The writer thread's id as `/proc` names it (0: none yet).
static WRITER_TID: AtomicU32 = AtomicU32::new(0);

/// Wakes the writer before its interval is up: a shard holding many events is written
/// while it still fits in cache, instead of growing to the whole interval's worth.
static WAKE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// The writer thread's id as `/proc` names it, 0 while there is none.
pub fn thread_id() -> u32 {
    WRITER_TID.load(Ordering::Relaxed)
}

/// Whether the thread was started (it may not have opened the file yet).
pub fn started() -> bool {
    THREAD_STARTED.load(Ordering::Relaxed)
}

/// Starts the writer thread on the first event of the process.
#[inline]
pub fn ensure_thread() {
    if THREAD_STARTED.load(Ordering::Relaxed) || THREAD_STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let interval = Duration::from_millis(settings::get().flush_ms);
    let spawned = crate::thread::spawn("vramtrace-writer", move || loop {
        if WRITER_TID.load(Ordering::Relaxed) == 0 {
            WRITER_TID.store(crate::thread::proc_tid(), Ordering::Relaxed);
        }
        {
            let mut woken = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
            // The first flush comes at once: it creates the file, and a crash in the
            // first interval then still has a file to write its events to.
            if !*woken && FIRST_FLUSHED.swap(true, Ordering::Relaxed) {
                woken = match WAKE.1.wait_timeout(woken, interval) {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                };
            }
            *woken = false;
        }
        // The process is ending: the thread that ends it writes.
        if writer_thread_may_flush() {
            writer::flush_periodic();
            crate::last_thread::exit_if_alone();
        }
        crate::nvml::poll();
    });
    if spawned.is_err() {
        no_writer_thread();
    }
}

/// Called by a hook whose push filled a shard to the wake-up mark.
#[cold]
pub fn wake() {
    let mut woken = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
    *woken = true;
    WAKE.1.notify_one();
}

/// The wake-up flag, held across a fork (see [`super::fork`]).
pub(super) fn hold_wake() -> MutexGuard<'static, bool> {
    WAKE.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// In a forked child: no thread until its first event.
pub(super) fn after_fork_child() {
    THREAD_STARTED.store(false, Ordering::Relaxed);
    FIRST_FLUSHED.store(false, Ordering::Relaxed);
    WRITER_TID.store(0, Ordering::Relaxed);
}
