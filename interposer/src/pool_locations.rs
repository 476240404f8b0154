//! The pools whose memory is not device memory (CUDA 13's host, host-NUMA and managed
//! pools), so that an allocation from one is recorded with its location.
//!
//! `cuMemAllocFromPoolAsync` names only the pool; the pool's location and allocation type
//! were given where the pool was made (`cuMemPoolCreate`) or fetched
//! (`cuMemGetDefaultMemPool`, `cuMemGetMemPool`). Those hooks note them here, whether or
//! not they record (a runtime's call reaches the driver's hook nested). Device pools are
//! not kept: a pool not found is a device pool, so a process that uses only device pools
//! looks up an empty table.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use vramtrace_schema::Location;

/// Host and managed pools a process uses at once: a handful (one default pool per
/// location and type, and the program's own). Past this, allocations from further pools
/// are recorded as device memory, and said once on stderr.
const SLOTS: usize = 64;
/// A slot being filled: its value is not written yet.
const FILLING: u64 = u64::MAX;

struct Slot {
    pool: AtomicU64,
    /// Location and NUMA node, as [`Location::to_word`] packs them.
    value: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        pool: AtomicU64::new(0),
        value: AtomicU64::new(0),
    }
}; SLOTS];
/// Slots ever used: lookups stop there.
static USED: AtomicUsize = AtomicUsize::new(0);

/// Notes where `pool`'s memory lives (a device pool forgets any earlier note: the
/// handle of a destroyed host pool can come back as a device pool's).
pub fn note(pool: u64, loc: Location, numa: Option<u32>) {
    if pool == 0 || pool == FILLING {
        return;
    }
    if loc == Location::Device {
        forget(pool);
        return;
    }
    let used = USED.load(Ordering::Acquire);
    for s in &TABLE[..used] {
        if s.pool.load(Ordering::Acquire) == pool {
            s.value.store(loc.to_word(numa), Ordering::Release);
            return;
        }
    }
    for (i, s) in TABLE.iter().enumerate() {
        if s.pool
            .compare_exchange(0, FILLING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            s.value.store(loc.to_word(numa), Ordering::Release);
            s.pool.store(pool, Ordering::Release);
            USED.fetch_max(i + 1, Ordering::AcqRel);
            return;
        }
    }
    crate::warn::once_for(
        &FULL,
        "more than 64 host or managed memory pools; allocations from further ones are recorded as device memory",
    );
}

static FULL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The pool was destroyed. Every slot that holds it: two threads noting one pool at
/// once may both have taken a slot.
pub fn forget(pool: u64) {
    let used = USED.load(Ordering::Acquire);
    for s in &TABLE[..used] {
        let _ = s
            .pool
            .compare_exchange(pool, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Destroys `pool` with `destroy` (the real call), returning its result. The pool is
/// forgotten before the driver can give its handle to a new pool that another thread
/// makes meanwhile, whose note would otherwise be forgotten by this destroy; a destroy
/// that fails leaves the pool as it was noted.
#[inline]
pub fn destroying(pool: u64, destroy: impl FnOnce() -> i32) -> i32 {
    let (loc, numa) = of(pool);
    forget(pool);
    let r = destroy();
    if r != 0 {
        note(pool, loc, numa);
    }
    r
}

/// Where memory from `pool` lives: `Device` unless a host or managed pool was noted.
#[inline]
pub fn of(pool: u64) -> (Location, Option<u32>) {
    if pool == 0 {
        return (Location::Device, None);
    }
    let used = USED.load(Ordering::Acquire);
    for s in &TABLE[..used] {
        if s.pool.load(Ordering::Acquire) == pool {
            return Location::from_word(s.value.load(Ordering::Acquire));
        }
    }
    (Location::Device, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_managed_pools_are_found_device_pools_are_not_kept() {
        note(0x1000, Location::HostNuma, Some(3));
        note(0x2000, Location::Managed, None);
        note(0x3000, Location::Device, None);
        assert_eq!(of(0x1000), (Location::HostNuma, Some(3)));
        assert_eq!(of(0x2000), (Location::Managed, None));
        assert_eq!(of(0x3000), (Location::Device, None));
        // The handle of a destroyed host pool, reused for a device pool.
        note(0x1000, Location::Device, None);
        assert_eq!(of(0x1000), (Location::Device, None));
        forget(0x2000);
        assert_eq!(of(0x2000), (Location::Device, None));
        // A destroy that fails keeps the note; one that succeeds leaves the handle free
        // for a new pool noted meanwhile.
        note(0x4000, Location::Host, None);
        assert_eq!(destroying(0x4000, || 1), 1);
        assert_eq!(of(0x4000), (Location::Host, None));
        let reused = destroying(0x4000, || {
            note(0x4000, Location::Managed, None);
            0
        });
        assert_eq!(reused, 0);
        assert_eq!(of(0x4000), (Location::Managed, None));
        assert_eq!(of(0), (Location::Device, None));
    }
}
