//! CUDA 13's pools by location and allocation type: `cuMemGetDefaultMemPool` and
//! `cuMemGetMemPool` (and the runtime's `cudaMem...` forms) hand out the default or
//! current pool of a device, the host, a host NUMA node or managed memory. Each pool's
//! location is noted ([`crate::pool_locations`]), so that allocations from it are recorded
//! as host or managed memory, never as device memory.
#![allow(non_snake_case)]

use super::{out, real, Call, CUDA_ERROR_INITIALIZATION, CUDA_ERROR_NOT_INITIALIZED};
use crate::pool_locations;
use crate::stack::here;
use std::ffi::{c_int, c_uint, c_void};
use vramtrace_schema::{Api, Location};

/// `CUmemLocation` / `cudaMemLocation`: the location type, then the device ordinal or
/// NUMA node (CUDA 13.2 makes the id a union of the same size).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    pub kind: c_uint,
    pub id: c_int,
}

/// The start of `CUmemPoolProps` and of `CUmemAllocationProp` (and their runtime twins):
/// allocation type, handle types, then the location.
#[repr(C)]
struct PropsHead {
    allocation_type: c_uint,
    handle_types: c_uint,
    location: MemLocation,
}

/// Where memory at `location` with `allocation_type` lives; the NUMA node for one node.
///
/// # Safety
/// `location` is null or points to a readable `CUmemLocation`.
pub unsafe fn location(
    location: *const MemLocation,
    allocation_type: c_uint,
) -> (Location, Option<u32>) {
    let (kind, id) = if location.is_null() {
        (0, 0)
    } else {
        let l = std::ptr::read_unaligned(location);
        (l.kind, l.id)
    };
    let loc = Location::from_driver(kind, allocation_type);
    let numa = (loc == Location::HostNuma).then_some(id as u32);
    (loc, numa)
}

/// Where memory made with these properties lives (`cuMemPoolCreate`, `cuMemCreate`).
///
/// # Safety
/// `props` is null or points to a `CUmemPoolProps` or `CUmemAllocationProp`.
pub unsafe fn props_location(props: *const c_void) -> (Location, Option<u32>) {
    if props.is_null() {
        return (Location::Device, None);
    }
    let head = std::ptr::read_unaligned(props.cast::<PropsHead>());
    location(&head.location, head.allocation_type)
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`: `id` is the device ordinal.
const LOCATION_DEVICE: c_uint = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN` (CUDA 13.4): the id is a union whose
/// `localized` member is two bytes, the device ordinal then the domain; the union's other
/// bytes are whatever the program left there.
const LOCATION_DEVICE_LOCALITY_DOMAIN: c_uint = 6;

/// The device that memory made with these properties is on (`cuMemCreate`), if they name
/// one.
///
/// # Safety
/// `props` is null or points to a `CUmemAllocationProp`.
pub unsafe fn props_device(props: *const c_void) -> Option<i32> {
    if props.is_null() {
        return None;
    }
    let l = std::ptr::read_unaligned(props.cast::<PropsHead>()).location;
    match l.kind {
        LOCATION_DEVICE => Some(l.id),
        LOCATION_DEVICE_LOCALITY_DOMAIN => Some(i32::from(l.id.to_ne_bytes()[0])),
        _ => None,
    }
}

macro_rules! get_pool {
    ($name:ident, $api:ident, $missing:expr) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(
            pool: *mut *mut c_void,
            loc: *mut MemLocation,
            allocation_type: c_uint,
        ) -> c_int {
            let Some(real) = real!($name(_, _, _)) else {
                return $missing;
            };
            let call = Call::enter(here!());
            let r = real(pool, loc, allocation_type);
            let handle = out(r, pool.cast::<u64>());
            // The location is read only after the driver accepted it.
            let (memory, numa) = if r == 0 {
                location(loc, allocation_type)
            } else {
                (Location::Device, None)
            };
            if r == 0 {
                // Noted whether or not this call is recorded: a runtime's call reaches
                // the driver's hook inside, and either may be the one the program used.
                pool_locations::note(handle, memory, numa);
            }
            call.finish(Api::$api, r, |e| {
                e.pool = Some(handle);
                e.loc = memory;
                e.numa = numa;
            });
            r
        }
    };
}

get_pool!(
    cuMemGetDefaultMemPool,
    CuMemGetDefaultMemPool,
    CUDA_ERROR_NOT_INITIALIZED
);
get_pool!(cuMemGetMemPool, CuMemGetMemPool, CUDA_ERROR_NOT_INITIALIZED);
get_pool!(
    cudaMemGetDefaultMemPool,
    CudaMemGetDefaultMemPool,
    CUDA_ERROR_INITIALIZATION
);
get_pool!(
    cudaMemGetMemPool,
    CudaMemGetMemPool,
    CUDA_ERROR_INITIALIZATION
);

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: c_uint, id: c_int) -> PropsHead {
        PropsHead {
            allocation_type: 1,
            handle_types: 0,
            location: MemLocation { kind, id },
        }
    }

    #[test]
    fn the_device_of_a_device_or_a_locality_domain_location() {
        let device = |h: &PropsHead| unsafe { props_device((h as *const PropsHead).cast()) };
        assert_eq!(device(&head(LOCATION_DEVICE, 3)), Some(3));
        // Device 1, domain 1, and two bytes the program never set.
        let localized = i32::from_ne_bytes([1, 1, 0x5a, 0x5a]);
        assert_eq!(
            device(&head(LOCATION_DEVICE_LOCALITY_DOMAIN, localized)),
            Some(1)
        );
        for host in [2, 3, 4] {
            assert_eq!(device(&head(host, 1)), None);
        }
        assert_eq!(unsafe { props_device(std::ptr::null()) }, None);
    }
}
