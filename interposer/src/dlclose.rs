//! The `dlclose` override. An unloaded library takes its code and its unwind tables with
//! it, and the stack walker reads those tables in place: while a library may be going,
//! no stack is taken (the event is recorded without one), the walker's module table is
//! dropped and rebuilt afterwards, and the writer names the frames queued so far first,
//! while their library is still mapped.

// The exported function's safety contract is that of the C function it stands in for.
#![allow(clippy::missing_safety_doc)]

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

static REAL: AtomicUsize = AtomicUsize::new(0);

/// `dlclose` calls begun and ended. A module table is good only if it was built while
/// they were equal and no call began before it was installed.
static BEGUN: AtomicU64 = AtomicU64::new(0);
static ENDED: AtomicU64 = AtomicU64::new(0);

/// Calls that unloaded something (the loader's own count of unloads went up): the epoch
/// of recorded frame addresses.
static UNLOADS: AtomicU64 = AtomicU64::new(0);

/// glibc's `dlclose`, for vramtrace's own handles too (they never unload anything).
///
/// # Safety
/// Same contract as `dlclose`.
pub unsafe fn real_dlclose(handle: *mut c_void) -> c_int {
    let mut f = REAL.load(Ordering::Acquire);
    if f == 0 {
        f = crate::dlsym::real_dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) as usize;
        REAL.store(f, Ordering::Release);
    }
    if f == 0 {
        return -1;
    }
    std::mem::transmute::<usize, DlcloseFn>(f)(handle)
}

/// A token for building a module table: `None` while a `dlclose` is under way.
pub fn quiet() -> Option<u64> {
    let begun = BEGUN.load(Ordering::SeqCst);
    (ENDED.load(Ordering::SeqCst) == begun).then_some(begun)
}

/// Whether no `dlclose` began since [`quiet`] gave `token`, and none is under way.
pub fn still_quiet(token: u64) -> bool {
    quiet() == Some(token)
}

/// How many `dlclose` calls unloaded something so far.
pub fn unloads() -> u64 {
    UNLOADS.load(Ordering::SeqCst)
}

/// In a child after fork: only the forking thread's own calls are still under way there
/// (the other threads are gone); they end as they return.
pub fn after_fork_child() {
    let own = DEPTH.try_with(Cell::get).unwrap_or(0);
    ENDED.store(BEGUN.load(Ordering::SeqCst) - own, Ordering::SeqCst);
}

thread_local! {
    /// This thread's `dlclose` calls under way (a destructor may call it again).
    static DEPTH: Cell<u64> = const { Cell::new(0) };
}

fn loader_unloads() -> u64 {
    crate::stack::modules::unloads_so_far()
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    // Nothing here may change what the program sees: errno included.
    let errno = *libc::__errno_location();
    let _ = std::panic::catch_unwind(|| {
        // Frames already queued get their names while their library is still mapped.
        if crate::settings::recording() {
            crate::writer::flush();
        }
    });
    let before = loader_unloads();
    let _ = DEPTH.try_with(|d| d.set(d.get() + 1));
    BEGUN.fetch_add(1, Ordering::SeqCst);
    // Waits for walks under way: none reads the library while it goes.
    crate::stack::capture::forget_modules();
    *libc::__errno_location() = errno;
    let result = real_dlclose(handle);
    let errno = *libc::__errno_location();
    if loader_unloads() != before {
        UNLOADS.fetch_add(1, Ordering::SeqCst);
    }
    ENDED.fetch_add(1, Ordering::SeqCst);
    let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    *libc::__errno_location() = errno;
    result
}
