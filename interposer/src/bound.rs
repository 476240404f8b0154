//! The queue's bound: a program that calls faster than the writer can write grew the
//! queue without limit (1.5 GB in 8 s, killed for memory at 20 GB). Now the bytes of
//! events waiting are bounded by `VRAMTRACE_QUEUE_MB` (default 16).
//!
//! At the bound, a hook waits for the writer, as long as the writer makes progress: the
//! program is slowed to the writer's pace and every call is still recorded exactly once.
//! Only when the writer makes no progress for [`STUCK_NS`] (a hung file system, or the
//! writer waiting for something the program holds) is the call not recorded, and counted:
//! the writer writes a `lost` record with the count (`docs/trace-format.md`), and later
//! calls are not held up again until the writer moves. Nothing is dropped silently.
//!
//! Shards keep their own byte counts and add to the shared total only by chunks of
//! [`chunk`] bytes, so that the hot path rarely writes a shared cache line; the total may
//! exceed the bound by up to one chunk per shard.

use crate::{clock, settings, writer};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Bytes of queued events accounted for by all shards together.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
/// The most [`QUEUED`] has been.
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Calls not recorded since the process (image or fork child) started.
static LOST: AtomicU64 = AtomicU64::new(0);
/// The writer's progress count when a hook last gave up waiting for it (`u64::MAX`: never).
static STALLED_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// How long a hook waits at the bound for a writer that makes no progress and is not
/// runnable (blocked in a write or on a lock): as long as `_exit` waits for a stalled
/// writer. One that is runnable only waits for a CPU: it is waited for. (100 ms lost 0.8%
/// of 3.2 million calls while the test suite loaded the machine: the writer sat in the
/// kernel's dirty-page throttling, state D, for longer.)
const STUCK_NS: u64 = 5_000_000_000;

fn limit() -> usize {
    settings::get().queue_bytes
}

/// Bytes a shard adds to the total at a time.
fn chunk() -> usize {
    (limit() / 256).clamp(1024, 64 * 1024)
}

/// After a push: a shard holding `bytes` has accounted for `accounted` of them so far.
#[inline]
pub fn account(accounted: &mut usize, bytes: usize) {
    if bytes < *accounted + chunk() {
        return;
    }
    let add = bytes - *accounted;
    *accounted = bytes;
    let now = QUEUED.fetch_add(add, Ordering::Relaxed) + add;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// A shard's `accounted` bytes left the queue (drained, or dropped in a fork child).
pub fn released(accounted: usize) {
    QUEUED.fetch_sub(accounted, Ordering::Relaxed);
}

/// Before a push: whether to queue the event. Below the bound, at once;
/// at it, after waiting for the writer while it makes progress. `false`: the call is
/// counted as not recorded.
#[inline]
pub fn room() -> bool {
    QUEUED.load(Ordering::Relaxed) < limit() || wait_for_room(STUCK_NS)
}

#[cold]
fn wait_for_room(stuck_ns: u64) -> bool {
    // A thread that writes its own events (the process is ending, or there is no writer
    // thread) and the writer's own thread never wait for the writer.
    if crate::lifecycle::sync_writes() || crate::thread::current_is_ours() {
        return true;
    }
    let mut seen = writer::progress();
    if STALLED_AT.load(Ordering::Relaxed) == seen {
        LOST.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    crate::lifecycle::writer_thread::wake();
    let mut since = clock::monotonic_ns();
    loop {
        std::thread::sleep(Duration::from_micros(200));
        if QUEUED.load(Ordering::Relaxed) < limit() {
            return true;
        }
        let progress = writer::progress();
        let now = clock::monotonic_ns();
        if progress != seen || writer_runnable() {
            (seen, since) = (progress, now);
        } else if now.saturating_sub(since) >= stuck_ns {
            STALLED_AT.store(seen, Ordering::Relaxed);
            LOST.fetch_add(1, Ordering::Relaxed);
            return false;
        }
    }
}

/// Whether the writer thread is running or waiting only for a CPU.
fn writer_runnable() -> bool {
    let tid = crate::lifecycle::writer_thread::thread_id();
    if tid == 0 {
        return false;
    }
    let path = format!("/proc/self/task/{tid}/stat");
    let stat = crate::own_files::read(&path, crate::last_thread::STAT_MAX).unwrap_or_default();
    crate::last_thread::state(&stat) == Some(b'R')
}

/// Calls not recorded so far.
pub fn lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// The most bytes queued at once so far.
pub fn peak() -> u64 {
    PEAK.load(Ordering::Relaxed) as u64
}

/// In a forked child: its queue starts empty, its losses at zero.
pub fn after_fork_child() {
    QUEUED.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    LOST.store(0, Ordering::Relaxed);
    STALLED_AT.store(u64::MAX, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At the bound, with no writer making progress: the first call waits (50 ms here)
    /// and is counted, the next is counted at once; below the bound again, calls are
    /// queued.
    #[test]
    fn a_stalled_writer_costs_counted_calls_not_memory() {
        let mut accounted = 0;
        account(&mut accounted, limit());
        assert_eq!(QUEUED.load(Ordering::Relaxed), limit());
        assert_eq!(peak(), limit() as u64);
        assert!(!wait_for_room(50_000_000));
        assert!(!room());
        assert_eq!(lost(), 2);
        released(accounted);
        assert!(room());
        assert_eq!(lost(), 2);
    }
}
