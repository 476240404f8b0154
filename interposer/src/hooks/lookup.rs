//! The driver's lookup functions. Everything the CUDA runtime calls comes through these,
//! so each returned pointer that is exactly a wrapped function is swapped for its
//! wrapper. A lookup of `cuGetProcAddress` itself (the runtime re-fetches it at 11030 and
//! 12000 and uses that from then on) returns the lookup wrapper, or later lookups escape.
#![allow(non_snake_case)]

use super::{real, CUDA_ERROR_NOT_INITIALIZED};
use crate::symbols;
use std::ffi::{c_char, c_int, c_void, CStr};

/// Replaces `*pfn` by its wrapper where one applies. Never panics, never fails the lookup.
///
/// # Safety
/// `symbol` is null or a C string; `pfn` is null or the out-pointer the lookup filled.
pub unsafe fn wrap_result(
    res: c_int,
    symbol: *const c_char,
    version: c_int,
    flags: u64,
    pfn: *mut *mut c_void,
) {
    if res != 0 || symbol.is_null() || pfn.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let found = *pfn as usize;
        let requested = CStr::from_ptr(symbol).to_bytes();
        let wrapped = symbols::wrap_looked_up(requested, version, flags, found);
        if wrapped != found {
            *pfn = wrapped as *mut c_void;
        }
    });
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> c_int {
    let Some(real) = real!(cuGetProcAddress(_, _, _, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let r = real(symbol, pfn, cuda_version, flags);
    wrap_result(r, symbol, cuda_version, flags, pfn);
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> c_int {
    let Some(real) = real!(cuGetProcAddress_v2(_, _, _, _, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let r = real(symbol, pfn, cuda_version, flags, symbol_status);
    wrap_result(r, symbol, cuda_version, flags, pfn);
    r
}
