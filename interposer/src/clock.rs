//! Time: CLOCK_MONOTONIC through the vDSO (no syscall), relative to the origin in the header.

use std::sync::atomic::{AtomicU64, Ordering};

static ORIGIN_MONO_NS: AtomicU64 = AtomicU64::new(0);
static ORIGIN_UNIX_NS: AtomicU64 = AtomicU64::new(0);

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Sets the origin: at load, and again in a forked child (its trace starts there).
pub fn init() {
    ORIGIN_MONO_NS.store(monotonic_ns(), Ordering::Relaxed);
    ORIGIN_UNIX_NS.store(read(libc::CLOCK_REALTIME), Ordering::Relaxed);
}

/// Nanoseconds since the origin.
#[inline]
pub fn now() -> u64 {
    monotonic_ns().saturating_sub(ORIGIN_MONO_NS.load(Ordering::Relaxed))
}

pub fn origin_mono_ns() -> u64 {
    ORIGIN_MONO_NS.load(Ordering::Relaxed)
}

pub fn origin_unix_ns() -> u64 {
    ORIGIN_UNIX_NS.load(Ordering::Relaxed)
}
