//! The `dlclose` override. An unloaded library takes its code and its unwind tables with
//! it, and the stack walker reads those tables in place: while a library may be going,
//! no stack is taken (the event is recorded without one), the walker's module table is
//! dropped and rebuilt afterwards, and the writer names the frames queued so far first,
//! while their library is still mapped.

// The exported function's safety contract is that of the C function it stands in for.
#![allow(clippy::missing_safety_doc)]

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

/// In a child after fork: no call is under way there (the thread making it is gone).
pub fn after_fork_child() {
    ENDED.store(BEGUN.load(Ordering::SeqCst), Ordering::SeqCst);
}

/// The loader's count of unloads (`dlpi_subs`).
fn loader_unloads() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        *(data as *mut u64) = (*info).dlpi_subs;
        1
    }
    let mut subs = 0u64;
    // SAFETY: the callback writes one u64 through the pointer it is given.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut subs as *mut u64 as *mut c_void) };
    subs
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
    *libc::__errno_location() = errno;
    result
}
