//! Runtime wrappers (`libcudart.so`): the `cudaMalloc` family, recorded under the runtime's
//! names, and the runtime's driver entry-point lookups.
#![allow(non_snake_case)]

use super::lookup::wrap_result;
use super::{hook, out, real, Call, CUDA_ERROR_INITIALIZATION};
use crate::stack::here;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use vramtrace_schema::Api;

/// `cudaStream_t`, `cudaMemPool_t`: opaque handles passed through.
type Handle = *mut c_void;

hook! {
    fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMalloc, |r, e| {
        e.addr = out(r, dev_ptr.cast::<u64>());
        e.size = size as u64;
    }
}

hook! {
    fn cudaMallocPitch(
        dev_ptr: *mut *mut c_void,
        pitch: *mut usize,
        width: usize,
        height: usize,
    ) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMallocPitch, |r, e| {
        e.addr = out(r, dev_ptr.cast::<u64>());
        e.size = if r == 0 {
            out(r, pitch) as u64 * height as u64
        } else {
            width as u64 * height as u64
        };
    }
}

hook! {
    fn cudaFree(dev_ptr: *mut c_void) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaFree, |r, e| e.addr = dev_ptr as u64
}

hook! {
    fn cudaMallocManaged(
        dev_ptr: *mut *mut c_void,
        size: usize,
        flags: c_uint,
    ) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMallocManaged, |r, e| {
        e.addr = out(r, dev_ptr.cast::<u64>());
        e.size = size as u64;
    }
}

hook! {
    fn cudaMallocAsync(
        dev_ptr: *mut *mut c_void,
        size: usize,
        stream: Handle,
    ) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMallocAsync, |r, e| {
        e.addr = out(r, dev_ptr.cast::<u64>());
        e.size = size as u64;
        e.stream = Some(stream as u64);
    }
}

hook! {
    fn cudaMallocFromPoolAsync(
        dev_ptr: *mut *mut c_void,
        size: usize,
        pool: Handle,
        stream: Handle,
    ) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMallocFromPoolAsync, |r, e| {
        e.addr = out(r, dev_ptr.cast::<u64>());
        e.size = size as u64;
        e.stream = Some(stream as u64);
        e.pool = Some(pool as u64);
        (e.loc, e.numa) = crate::pool_locations::of(pool as u64);
    }
}

hook! {
    fn cudaFreeAsync(dev_ptr: *mut c_void, stream: Handle) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaFreeAsync, |r, e| {
        e.addr = dev_ptr as u64;
        e.stream = Some(stream as u64);
    }
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemPoolCreate(pool: *mut Handle, props: *const c_void) -> c_int {
    let Some(real) = real!(cudaMemPoolCreate(_, _)) else {
        return CUDA_ERROR_INITIALIZATION;
    };
    let call = Call::enter(here!());
    let r = real(pool, props);
    let handle = out(r, pool.cast::<u64>());
    // cudaMemPoolProps has CUmemPoolProps' layout; read only once the runtime accepted it.
    let (loc, numa) = if r == 0 {
        super::mempool::props_location(props)
    } else {
        Default::default()
    };
    if r == 0 {
        crate::pool_locations::note(handle, loc, numa);
    }
    call.finish(Api::CudaMemPoolCreate, r, |e| {
        e.pool = Some(handle);
        (e.loc, e.numa) = (loc, numa);
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaMemPoolDestroy(pool: Handle) -> c_int {
    let Some(real) = real!(cudaMemPoolDestroy(_)) else {
        return CUDA_ERROR_INITIALIZATION;
    };
    let call = Call::enter(here!());
    let r = crate::pool_locations::destroying(pool as u64, || real(pool));
    call.finish(Api::CudaMemPoolDestroy, r, |e| e.pool = Some(pool as u64));
    r
}

hook! {
    fn cudaMemPoolTrimTo(
        pool: Handle,
        min_bytes_to_keep: usize,
    ) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMemPoolTrimTo, |r, e| {
        e.pool = Some(pool as u64);
        e.size = min_bytes_to_keep as u64;
    }
}

hook! {
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMallocHost, |r, e| {
        e.addr = out(r, ptr.cast::<u64>());
        e.size = size as u64;
    }
}

hook! {
    fn cudaHostAlloc(
        ptr: *mut *mut c_void,
        size: usize,
        flags: c_uint,
    ) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaHostAlloc, |r, e| {
        e.addr = out(r, ptr.cast::<u64>());
        e.size = size as u64;
    }
}

hook! {
    fn cudaFreeHost(ptr: *mut c_void) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaFreeHost, |r, e| e.addr = ptr as u64
}

hook! {
    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> c_int, or CUDA_ERROR_INITIALIZATION;
    Api::CudaMemGetInfo, |r, e| {
        if r == 0 {
            e.free = Some(out(r, free) as u64);
            e.total = Some(out(r, total) as u64);
        }
    }
}

macro_rules! entry_point {
    ($name:ident) => {
        /// `cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus)` (CUDA 12 form).
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            symbol: *const c_char,
            func_ptr: *mut *mut c_void,
            flags: c_ulonglong,
            status: *mut c_int,
        ) -> c_int {
            let Some(real) = real!($name(_, _, _, _)) else {
                return CUDA_ERROR_INITIALIZATION;
            };
            let r = real(symbol, func_ptr, flags, status);
            // No version is given: only a pointer `dladdr` can name exactly is wrapped.
            wrap_result(r, symbol, 0, flags, func_ptr);
            r
        }
    };
}

macro_rules! entry_point_by_version {
    ($name:ident) => {
        /// `cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, driverStatus)`.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            symbol: *const c_char,
            func_ptr: *mut *mut c_void,
            cuda_version: c_uint,
            flags: c_ulonglong,
            status: *mut c_int,
        ) -> c_int {
            let Some(real) = real!($name(_, _, _, _, _)) else {
                return CUDA_ERROR_INITIALIZATION;
            };
            let r = real(symbol, func_ptr, cuda_version, flags, status);
            wrap_result(r, symbol, cuda_version as c_int, flags, func_ptr);
            r
        }
    };
}

entry_point!(cudaGetDriverEntryPoint);
entry_point!(cudaGetDriverEntryPoint_ptsz);
entry_point_by_version!(cudaGetDriverEntryPointByVersion);
entry_point_by_version!(cudaGetDriverEntryPointByVersion_ptsz);
