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

/// `dlclose` calls begun so far, and those under way.
static BEGUN: AtomicU64 = AtomicU64::new(0);
static UNDER_WAY: AtomicUsize = AtomicUsize::new(0);

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

/// How many `dlclose` calls have begun: a module table built across a change of it may
/// hold a library that is gone.
pub fn begun() -> u64 {
    BEGUN.load(Ordering::SeqCst)
}

/// Whether a `dlclose` is under way now.
pub fn under_way() -> bool {
    UNDER_WAY.load(Ordering::SeqCst) > 0
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        // Frames already queued get their names while their library is still mapped.
        if crate::settings::recording() {
            crate::writer::flush();
        }
    });
    BEGUN.fetch_add(1, Ordering::SeqCst);
    UNDER_WAY.fetch_add(1, Ordering::SeqCst);
    // Waits for walks that began before: none reads the library while it goes.
    crate::stack::capture::forget_modules();
    let result = real_dlclose(handle);
    UNDER_WAY.fetch_sub(1, Ordering::SeqCst);
    result
}
