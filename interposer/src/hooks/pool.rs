//! Driver wrappers: stream-ordered allocation and memory pools.
#![allow(non_snake_case)]

use super::mempool::props_location;
use super::{hook, out, real, Call, CUDA_ERROR_NOT_INITIALIZED};
use crate::pool_locations;
use crate::stack::here;
use cudarc::driver::sys::{CUdeviceptr, CUmemPoolProps, CUmemoryPool, CUstream};
use std::ffi::c_int;
use vramtrace_schema::Api;

macro_rules! alloc_async {
    ($name:ident, $api:ident) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            dptr: *mut CUdeviceptr,
            size: usize,
            stream: CUstream,
        ) -> c_int {
            let Some(real) = real!($name(_, _, _)) else {
                return CUDA_ERROR_NOT_INITIALIZED;
            };
            let call = Call::enter(here!());
            let r = real(dptr, size, stream);
            call.finish(Api::$api, r, |e| {
                e.addr = out(r, dptr);
                e.size = size as u64;
                e.stream = Some(stream as u64);
            });
            r
        }
    };
}

macro_rules! alloc_from_pool {
    ($name:ident, $api:ident) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            dptr: *mut CUdeviceptr,
            size: usize,
            pool: CUmemoryPool,
            stream: CUstream,
        ) -> c_int {
            let Some(real) = real!($name(_, _, _, _)) else {
                return CUDA_ERROR_NOT_INITIALIZED;
            };
            let call = Call::enter(here!());
            let r = real(dptr, size, pool, stream);
            call.finish(Api::$api, r, |e| {
                e.addr = out(r, dptr);
                e.size = size as u64;
                e.stream = Some(stream as u64);
                e.pool = Some(pool as u64);
                (e.loc, e.numa) = pool_locations::of(pool as u64);
            });
            r
        }
    };
}

macro_rules! free_async {
    ($name:ident, $api:ident) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(dptr: CUdeviceptr, stream: CUstream) -> c_int {
            let Some(real) = real!($name(_, _)) else {
                return CUDA_ERROR_NOT_INITIALIZED;
            };
            let call = Call::enter(here!());
            let r = real(dptr, stream);
            call.finish(Api::$api, r, |e| {
                e.addr = dptr;
                e.stream = Some(stream as u64);
            });
            r
        }
    };
}

alloc_async!(cuMemAllocAsync, CuMemAllocAsync);
alloc_async!(cuMemAllocAsync_ptsz, CuMemAllocAsync_ptsz);
alloc_from_pool!(cuMemAllocFromPoolAsync, CuMemAllocFromPoolAsync);
alloc_from_pool!(cuMemAllocFromPoolAsync_ptsz, CuMemAllocFromPoolAsync_ptsz);
free_async!(cuMemFreeAsync, CuMemFreeAsync);
free_async!(cuMemFreeAsync_ptsz, CuMemFreeAsync_ptsz);

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> c_int {
    let Some(real) = real!(cuMemPoolCreate(_, _)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = real(pool, props);
    let handle = out(r, pool.cast::<u64>());
    // Read only after the driver accepted the properties.
    let (loc, numa) = if r == 0 {
        props_location(props.cast())
    } else {
        Default::default()
    };
    if r == 0 {
        pool_locations::note(handle, loc, numa);
    }
    call.finish(Api::CuMemPoolCreate, r, |e| {
        e.pool = Some(handle);
        (e.loc, e.numa) = (loc, numa);
    });
    r
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> c_int {
    let Some(real) = real!(cuMemPoolDestroy(_)) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let call = Call::enter(here!());
    let r = pool_locations::destroying(pool as u64, || real(pool));
    call.finish(Api::CuMemPoolDestroy, r, |e| e.pool = Some(pool as u64));
    r
}

hook! {
    fn cuMemPoolTrimTo(
        pool: CUmemoryPool,
        min_bytes_to_keep: usize,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemPoolTrimTo, |r, e| {
        e.pool = Some(pool as u64);
        e.size = min_bytes_to_keep as u64;
    }
}
