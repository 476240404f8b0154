//! The process's life as the trace sees it: one state machine, and every way into it.
//!
//! ```text
//!   load (start) ---> Recording ---------------(no writer thread)----> Synchronous
//!                        |                                                 |
//!                        +-- exit, _exit, exec: finish --+-----------------+
//!                                                        v
//!                    Stopping (the ending thread waits for the writer)
//!                                                        |  (writer taken)
//!                                                        v
//!                    Ending (everything queued written, then the end record)
//!                                                        |  (exec failed)
//!                                                        v
//!                                                   Synchronous
//!   fork, in the child: Recording again, a trace of its own, no thread until its first event
//! ```
//!
//! In `Recording` the writer thread ([`writer_thread`]) writes every flush interval and
//! hooks only queue. In `Synchronous` and `Ending` each hook writes what it queued
//! itself: there is no thread to do it, or the thread that ends the process must not
//! leave events behind it. In `Stopping` and `Ending` the writer thread stands aside.
//! A `vfork` child shares the parent's memory and runs no fork handlers: only the process
//! that owns the writer moves the machine.
//!
//! Where each transition comes from: [`start`] (the library's constructor), [`ends`]
//! (`_exit`, `quick_exit`, `exec*`, fatal signals) and [`exec_list`] (`execl*`), [`fork`] (the fork handlers),
//! the library's destructor ([`finish`] with "exit"), and `dlclose` (`crate::dlclose`,
//! which flushes before a library goes).

pub mod ends;
pub mod exec_list;
pub mod fork;
pub mod writer_thread;

use crate::writer;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::time::Duration;

/// Where the process is; see the module's picture.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    Recording,
    Synchronous,
    Stopping,
    Ending,
}

/// The phase as two bits, each set by its own transition: hooks write their own events
/// (`SYNC`), the writer thread stands aside (`STOPPING`). `Ending` is both.
static PHASE: AtomicU8 = AtomicU8::new(0);
const SYNC: u8 = 1;
const STOPPING: u8 = 2;

pub fn phase() -> Phase {
    match PHASE.load(Ordering::Relaxed) {
        0 => Phase::Recording,
        SYNC => Phase::Synchronous,
        STOPPING => Phase::Stopping,
        _ => Phase::Ending,
    }
}

/// Whether hooks must write synchronously (no writer thread, or the process is ending).
/// Asked after the push: the shard's lock orders it after the last flush's drain.
#[inline]
pub fn sync_writes() -> bool {
    matches!(phase(), Phase::Synchronous | Phase::Ending)
}

/// Whether the writer thread may take the writer: not once the process image is ending.
/// A writer far behind a busy program took the lock again right after each flush, and
/// the ending thread (std's mutex is not fair) waited for tens of seconds.
pub fn writer_thread_may_flush() -> bool {
    matches!(phase(), Phase::Recording | Phase::Synchronous)
}

/// The writer thread could not be started: every hook writes what it queued.
fn no_writer_thread() {
    PHASE.fetch_or(SYNC, Ordering::Relaxed);
}

/// The process whose writer this is: a `vfork` child shares the parent's memory (and
/// runs no fork handlers), and its `exec` or `_exit` must not end the parent's trace.
/// (Python's subprocess closes the child's descriptors first: the write failed and the
/// parent's trace stopped for good.)
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Records this process as the writer's owner: at load and in a forked child.
fn own() {
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
}

/// Whether the calling process may end the trace: not when it is a `vfork` child.
fn owns() -> bool {
    // SAFETY: getpid has no preconditions.
    OWNER.load(Ordering::Relaxed) == unsafe { libc::getpid() } as u32
}

/// At load: this process owns the writer; the fork and crash handlers are installed.
pub fn start() {
    own();
    fork::install();
    ends::install_crash_handlers();
}

/// The end of the process image: everything queued is written, then the end record.
/// Later events (teardown in other threads) are written as they come.
pub fn finish(reason: &str) {
    if writer::holding() || !owns() {
        return;
    }
    PHASE.fetch_or(STOPPING, Ordering::Relaxed);
    end(&mut writer::lock(), reason);
}

/// [`finish`], unless the writer, busy on another thread, makes no progress for
/// `stalled` (a write blocked on a hung file system) or has not let go after `at_most`:
/// then nothing more is written.
pub fn finish_within(reason: &str, stalled: Duration, at_most: Duration) {
    if writer::holding() || !owns() {
        return;
    }
    PHASE.fetch_or(STOPPING, Ordering::Relaxed);
    let start = std::time::Instant::now();
    let mut seen = writer::progress();
    let mut deadline = start + stalled;
    loop {
        if let Some(mut w) = writer::try_lock() {
            end(&mut w, reason);
            return;
        }
        let now = std::time::Instant::now();
        let progress = writer::progress();
        if progress != seen {
            (seen, deadline) = (progress, now + stalled);
        }
        if now >= deadline || now >= start + at_most {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Stopping to Ending, with the writer held: the last flush and the end record.
fn end(w: &mut writer::Locked, reason: &str) {
    // Synchronous from here on, before the last flush drains the shards: a thread whose
    // push lands in a shard after the drain took it (the final write, stacks named, can
    // take tens of milliseconds) takes that shard's lock after the drain released it, so
    // it sees the flag and writes its event itself. Set after the flush, events queued in
    // that window stayed in the queue until the process was gone.
    PHASE.fetch_or(SYNC, Ordering::Relaxed);
    w.finish(reason);
}

/// An `exec` failed: the program goes on, and the writer thread writes again. (Events
/// stay synchronous: the end record is written, and later ones follow it.)
fn resume() {
    if owns() {
        PHASE.fetch_and(!STOPPING, Ordering::Relaxed);
    }
}

/// In a forked child: recording again, from a fresh writer.
fn restart_in_child() {
    PHASE.store(0, Ordering::Relaxed);
    own();
}
