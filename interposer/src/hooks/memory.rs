//! Driver wrappers: device, pitch, managed and pinned host memory, arrays, `cuMemGetInfo`.
#![allow(non_snake_case)]

use super::{hook, out, CUDA_ERROR_NOT_INITIALIZED};
use cudarc::driver::sys::{CUarray, CUdeviceptr, CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY_DESCRIPTOR};
use std::ffi::{c_int, c_uint, c_void};
use vramtrace_schema::Api;

hook! {
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemAlloc_v2, |r, e| {
        e.addr = out(r, dptr);
        e.size = size as u64;
    }
}

hook! {
    fn cuMemAllocPitch_v2(
        dptr: *mut CUdeviceptr,
        pitch: *mut usize,
        width_bytes: usize,
        height: usize,
        element_size: c_uint,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemAllocPitch_v2, |r, e| {
        e.addr = out(r, dptr);
        // The real size is the padded row pitch times the rows, not width x height.
        let p = out(r, pitch);
        e.size = if r == 0 {
            p as u64 * height as u64
        } else {
            width_bytes as u64 * height as u64
        };
    }
}

hook! {
    fn cuMemFree_v2(dptr: CUdeviceptr) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemFree_v2, |r, e| e.addr = dptr
}

hook! {
    fn cuMemAllocManaged(
        dptr: *mut CUdeviceptr,
        size: usize,
        flags: c_uint,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemAllocManaged, |r, e| {
        e.addr = out(r, dptr);
        e.size = size as u64;
    }
}

hook! {
    fn cuMemGetInfo_v2(
        free: *mut usize,
        total: *mut usize,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemGetInfo_v2, |r, e| {
        if r == 0 {
            e.free = Some(out(r, free) as u64);
            e.total = Some(out(r, total) as u64);
        }
    }
}

hook! {
    fn cuMemHostAlloc(
        pp: *mut *mut c_void,
        size: usize,
        flags: c_uint,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemHostAlloc, |r, e| {
        e.addr = out(r, pp.cast::<u64>());
        e.size = size as u64;
    }
}

hook! {
    fn cuMemAllocHost_v2(
        pp: *mut *mut c_void,
        size: usize,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemAllocHost_v2, |r, e| {
        e.addr = out(r, pp.cast::<u64>());
        e.size = size as u64;
    }
}

hook! {
    fn cuMemFreeHost(p: *mut c_void) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemFreeHost, |r, e| e.addr = p as u64
}

hook! {
    fn cuMemHostRegister_v2(
        p: *mut c_void,
        size: usize,
        flags: c_uint,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemHostRegister_v2, |r, e| {
        e.addr = p as u64;
        e.size = size as u64;
    }
}

hook! {
    fn cuMemHostUnregister(p: *mut c_void) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemHostUnregister, |r, e| e.addr = p as u64
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

hook! {
    fn cuArrayCreate_v2(
        array: *mut CUarray,
        desc: *const CUDA_ARRAY_DESCRIPTOR,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuArrayCreate_v2, |r, e| {
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
    }
}

hook! {
    fn cuArray3DCreate_v2(
        array: *mut CUarray,
        desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuArray3DCreate_v2, |r, e| {
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
    }
}

hook! {
    fn cuArrayDestroy(array: CUarray) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuArrayDestroy, |r, e| e.addr = array as u64
}
