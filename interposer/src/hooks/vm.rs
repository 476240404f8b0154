//! Driver wrappers: virtual memory management (PyTorch's expandable segments).
//!
//! Physical memory is taken by `cuMemCreate` and given back only when the handle is
//! released and its last mapping is gone; the analyzer follows that from these events.
#![allow(non_snake_case)]

use super::mempool::{props_device, props_location};
use super::{hook, out, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_OUT_OF_MEMORY};
use cudarc::driver::sys::{
    CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemGenericAllocationHandle,
};
use std::ffi::{c_int, c_ulonglong};
use vramtrace_schema::Api;

hook! {
    fn cuMemAddressReserve(
        ptr: *mut CUdeviceptr,
        size: usize,
        alignment: usize,
        addr: CUdeviceptr,
        flags: c_ulonglong,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemAddressReserve, |r, e| {
        e.addr = out(r, ptr);
        e.size = size as u64;
    }
}

hook! {
    fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemAddressFree, |r, e| {
        e.addr = ptr;
        e.size = size as u64;
    }
}

hook! {
    fn cuMemCreate(
        handle: *mut CUmemGenericAllocationHandle,
        size: usize,
        prop: *const CUmemAllocationProp,
        flags: c_ulonglong,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemCreate, |r, e| {
        e.handle = Some(out(r, handle));
        e.size = size as u64;
        // Read only once the driver read them: it rejects some calls (a size that is no
        // multiple of the granularity, no context) before it looks at the properties, and
        // then the pointer may be anything. An allocation that failed for want of memory
        // was placed first, so its location is known to be readable.
        if !prop.is_null() && (r == 0 || r == CUDA_ERROR_OUT_OF_MEMORY) {
            // Read as plain integers (props_location): the struct's enum fields are not
            // touched, so a location type newer than cudarc's enum is no undefined value.
            (e.loc, e.numa) = props_location(prop.cast());
            // The memory is on the device the properties name (as an ordinal, or in a
            // locality domain's two bytes), whatever context is current. Host memory keeps
            // the calling thread's device, as pinned host memory does.
            if let Some(dev) = props_device(prop.cast()) {
                e.dev = dev;
            }
        }
    }
}

hook! {
    fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemRelease, |r, e| e.handle = Some(handle)
}

hook! {
    fn cuMemMap(
        ptr: CUdeviceptr,
        size: usize,
        offset: usize,
        handle: CUmemGenericAllocationHandle,
        flags: c_ulonglong,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemMap, |r, e| {
        e.addr = ptr;
        e.size = size as u64;
        e.offset = Some(offset as u64);
        e.handle = Some(handle);
    }
}

hook! {
    fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemUnmap, |r, e| {
        e.addr = ptr;
        e.size = size as u64;
    }
}

hook! {
    fn cuMemSetAccess(
        ptr: CUdeviceptr,
        size: usize,
        desc: *const CUmemAccessDesc,
        count: usize,
    ) -> c_int, or CUDA_ERROR_NOT_INITIALIZED;
    Api::CuMemSetAccess, |r, e| {
        e.addr = ptr;
        e.size = size as u64;
    }
}
