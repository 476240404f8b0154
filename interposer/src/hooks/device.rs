//! The device of the caller's current context, for each event.
//!
//! Asked of the driver with `cuCtxGetDevice`, a read-only query that changes nothing.
//! Its address comes from the same libcuda whose functions the program looked up.

use crate::symbols;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

static CTX_GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
/// The driver function last used to look for libcuda, so a failed search is retried
/// only when a new driver pointer appears.
static SEARCHED_FROM: AtomicUsize = AtomicUsize::new(0);

/// Device ordinal of the current context, or -1 when there is none (or no driver yet).
#[inline]
pub fn current() -> i32 {
    let mut f = CTX_GET_DEVICE.load(Ordering::Acquire);
    if f == 0 {
        f = resolve();
        if f == 0 {
            return -1;
        }
    }
    type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: the address of libcuda's cuCtxGetDevice(CUdevice*).
    let get = unsafe { std::mem::transmute::<usize, CtxGetDevice>(f) };
    let mut dev: c_int = -1;
    // SAFETY: dev is a valid out-pointer.
    if unsafe { get(&mut dev) } == 0 {
        dev
    } else {
        -1
    }
}

#[cold]
fn resolve() -> usize {
    let seen = symbols::driver_function_seen();
    if seen == 0 || SEARCHED_FROM.swap(seen, Ordering::AcqRel) == seen {
        return 0;
    }
    let Some(file) = symbols::locate(seen).and_then(|l| l.file) else {
        return 0;
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded.
    let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return 0;
    }
    // SAFETY: valid handle and name.
    let p = unsafe { crate::dlsym::real_dlsym(handle, c"cuCtxGetDevice".as_ptr()) } as usize;
    // SAFETY: balances the reference dlopen took.
    unsafe { libc::dlclose(handle) };
    CTX_GET_DEVICE.store(p, Ordering::Release);
    p
}
