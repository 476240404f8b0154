//! Read-only questions vramtrace asks the driver itself: the device of the caller's
//! current context (each event), and free/total memory right after a failed allocation.
//! Neither changes any state. The functions come from the same libcuda whose functions
//! the program looked up.

use crate::symbols;
use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One driver function, found lazily.
struct DriverFn {
    name: &'static CStr,
    address: AtomicUsize,
    /// The driver function whose library a search last failed in, so a failed search is
    /// retried only when a new driver pointer appears. Only a finished search sets it:
    /// threads that miss `address` together each search (the answer is the same), because
    /// one that returned early while another was still searching took its caller's
    /// context for no context at all (device -1).
    failed_from: AtomicUsize,
}

impl DriverFn {
    const fn new(name: &'static CStr) -> DriverFn {
        DriverFn {
            name,
            address: AtomicUsize::new(0),
            failed_from: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn get(&self) -> usize {
        let f = self.address.load(Ordering::Acquire);
        if f != 0 {
            return f;
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> usize {
        let seen = symbols::driver_function_seen();
        if seen == 0 || self.failed_from.load(Ordering::Acquire) == seen {
            return 0;
        }
        let p = Self::search(self.name, seen);
        if p == 0 {
            self.failed_from.store(seen, Ordering::Release);
        } else {
            self.address.store(p, Ordering::Release);
        }
        p
    }

    /// `name` in the library that holds the driver function at `seen`, or 0.
    fn search(name: &CStr, seen: usize) -> usize {
        let Some(file) = symbols::locate(seen).and_then(|l| l.file) else {
            return 0;
        };
        // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded.
        let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return 0;
        }
        // SAFETY: valid handle and name.
        let p = unsafe { crate::dlsym::real_dlsym(handle, name.as_ptr()) } as usize;
        // SAFETY: balances the reference dlopen took.
        unsafe { crate::dlclose::real_dlclose(handle) };
        p
    }
}

static CTX_GET_DEVICE: DriverFn = DriverFn::new(c"cuCtxGetDevice");
static MEM_GET_INFO: DriverFn = DriverFn::new(c"cuMemGetInfo_v2");

/// Device ordinal of the current context, or -1 when there is none (or no driver yet).
#[inline]
pub fn current() -> i32 {
    let f = CTX_GET_DEVICE.get();
    if f == 0 {
        return -1;
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

/// What the driver says is free and in total on the current context's device.
pub fn meminfo() -> Option<(u64, u64)> {
    let f = MEM_GET_INFO.get();
    if f == 0 {
        return None;
    }
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
    // SAFETY: the address of libcuda's cuMemGetInfo_v2(size_t*, size_t*).
    let get = unsafe { std::mem::transmute::<usize, MemGetInfo>(f) };
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    (unsafe { get(&mut free, &mut total) } == 0).then_some((free as u64, total as u64))
}
