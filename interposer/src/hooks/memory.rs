//! Driver wrappers: device, pitch, managed and pinned host memory, arrays, `cuMemGetInfo`.
#![allow(non_snake_case)]

use super::{out, real, Call, CUDA_ERROR_NOT_INITIALIZED};
use crate::stack::here;
use cudarc::driver::sys::{CUarray, CUdeviceptr, CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY_DESCRIPTOR};
use std::ffi::{c_int, c_uint, c_void};
use vramtrace_schema::Api;

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> c_int {
    let Some(real) = real!(cuMemAlloc_v2(_, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(dptr, size);
    call.finish(Api::CuMemAlloc_v2, r, |e| {
        e.addr = out(r, dptr);
        e.size = size as u64;
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width_bytes: usize,
    height: usize,
    element_size: c_uint,
) -> c_int {
    let Some(real) = real!(cuMemAllocPitch_v2(_, _, _, _, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(dptr, pitch, width_bytes, height, element_size);
    call.finish(Api::CuMemAllocPitch_v2, r, |e| {
        e.addr = out(r, dptr);
        // The real size is the padded row pitch times the rows, not width x height.
        let p = out(r, pitch);
        e.size = if r == 0 {
            p as u64 * height as u64
        } else {
            width_bytes as u64 * height as u64
        };
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> c_int {
    let Some(real) = real!(cuMemFree_v2(_)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(dptr);
    call.finish(Api::CuMemFree_v2, r, |e| e.addr = dptr);
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    size: usize,
    flags: c_uint,
) -> c_int {
    let Some(real) = real!(cuMemAllocManaged(_, _, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(dptr, size, flags);
    call.finish(Api::CuMemAllocManaged, r, |e| {
        e.addr = out(r, dptr);
        e.size = size as u64;
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> c_int {
    let Some(real) = real!(cuMemGetInfo_v2(_, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(free, total);
    call.finish(Api::CuMemGetInfo_v2, r, |e| {
        if r == 0 {
            e.free = Some(out(r, free) as u64);
            e.total = Some(out(r, total) as u64);
        }
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: c_uint) -> c_int {
    let Some(real) = real!(cuMemHostAlloc(_, _, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(pp, size, flags);
    call.finish(Api::CuMemHostAlloc, r, |e| {
        e.addr = out(r, pp.cast::<u64>());
        e.size = size as u64;
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> c_int {
    let Some(real) = real!(cuMemAllocHost_v2(_, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(pp, size);
    call.finish(Api::CuMemAllocHost_v2, r, |e| {
        e.addr = out(r, pp.cast::<u64>());
        e.size = size as u64;
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> c_int {
    let Some(real) = real!(cuMemFreeHost(_)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(p);
    call.finish(Api::CuMemFreeHost, r, |e| e.addr = p as u64);
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: c_uint) -> c_int {
    let Some(real) = real!(cuMemHostRegister_v2(_, _, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(p, size, flags);
    call.finish(Api::CuMemHostRegister_v2, r, |e| {
        e.addr = p as u64;
        e.size = size as u64;
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> c_int {
    let Some(real) = real!(cuMemHostUnregister(_)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(p);
    call.finish(Api::CuMemHostUnregister, r, |e| e.addr = p as u64);
    r
}

/// Bytes of one element of a CUDA array format (`CUarray_format`), read as a raw number:
/// a format a newer driver adds must not become an invalid Rust enum value. Formats
/// without a fixed element size (video, block-compressed) count one byte.
fn format_bytes(format: u32) -> u64 {
    match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => 1,
    }
}

/// Reads `(width, height, depth, format, channels)` of an array descriptor field by field
/// through raw pointers, never forming a reference to cudarc's enum-typed `Format`.
unsafe fn array_extent(
    w: *const usize,
    h: *const usize,
    d: Option<*const usize>,
    f: *const u32,
    c: *const c_uint,
) -> u64 {
    let dims = [
        std::ptr::read_unaligned(w),
        std::ptr::read_unaligned(h),
        d.map(|d| std::ptr::read_unaligned(d)).unwrap_or(1),
    ];
    let elems: u64 = dims.iter().map(|&x| x.max(1) as u64).product();
    elems * std::ptr::read_unaligned(c) as u64 * format_bytes(std::ptr::read_unaligned(f))
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuArrayCreate_v2(
    array: *mut CUarray,
    desc: *const CUDA_ARRAY_DESCRIPTOR,
) -> c_int {
    let Some(real) = real!(cuArrayCreate_v2(_, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(array, desc);
    call.finish(Api::CuArrayCreate_v2, r, |e| {
        e.addr = out(r, array.cast::<u64>());
        if !desc.is_null() {
            e.size = array_extent(
                std::ptr::addr_of!((*desc).Width),
                std::ptr::addr_of!((*desc).Height),
                None,
                std::ptr::addr_of!((*desc).Format).cast(),
                std::ptr::addr_of!((*desc).NumChannels),
            );
        }
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuArray3DCreate_v2(
    array: *mut CUarray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
) -> c_int {
    let Some(real) = real!(cuArray3DCreate_v2(_, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(array, desc);
    call.finish(Api::CuArray3DCreate_v2, r, |e| {
        e.addr = out(r, array.cast::<u64>());
        if !desc.is_null() {
            e.size = array_extent(
                std::ptr::addr_of!((*desc).Width),
                std::ptr::addr_of!((*desc).Height),
                Some(std::ptr::addr_of!((*desc).Depth)),
                std::ptr::addr_of!((*desc).Format).cast(),
                std::ptr::addr_of!((*desc).NumChannels),
            );
        }
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuArrayDestroy(array: CUarray) -> c_int {
    let Some(real) = real!(cuArrayDestroy(_)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(array);
    call.finish(Api::CuArrayDestroy, r, |e| e.addr = array as u64);
    r
}
