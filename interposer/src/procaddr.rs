//! Which variant a driver lookup returns, for pointers `dladdr` cannot name.
//!
//! `cuGetProcAddress(symbol, version, flags)` asks by base name; the driver answers with
//! the newest variant introduced at or before `version`, and with the `_ptsz` variant
//! under the per-thread-stream flag. Wrappers exist for one ABI each, so a pointer is
//! wrapped only when its variant is known. Normally the exported symbol at the returned
//! address names it; this table (from cuda.h's versioned names) covers a driver that
//! hands out unexported aliases. A version below every entry means an older ABI that
//! vramtrace does not wrap (`cuMemAlloc` before 3020 takes 32-bit sizes).

use crate::symbols::Slot;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// (base name, first version of the wrapped variant, variant, per-thread variant).
const VARIANTS: &[(&str, i32, Slot, Option<Slot>)] = &[
    ("cuMemAlloc", 3020, Slot::cuMemAlloc_v2, None),
    ("cuMemAllocPitch", 3020, Slot::cuMemAllocPitch_v2, None),
    ("cuMemFree", 3020, Slot::cuMemFree_v2, None),
    ("cuMemAllocManaged", 6000, Slot::cuMemAllocManaged, None),
    ("cuMemGetInfo", 3020, Slot::cuMemGetInfo_v2, None),
    (
        "cuMemAllocAsync",
        11020,
        Slot::cuMemAllocAsync,
        Some(Slot::cuMemAllocAsync_ptsz),
    ),
    (
        "cuMemFreeAsync",
        11020,
        Slot::cuMemFreeAsync,
        Some(Slot::cuMemFreeAsync_ptsz),
    ),
    (
        "cuMemAllocFromPoolAsync",
        11020,
        Slot::cuMemAllocFromPoolAsync,
        Some(Slot::cuMemAllocFromPoolAsync_ptsz),
    ),
    ("cuMemPoolCreate", 11020, Slot::cuMemPoolCreate, None),
    ("cuMemPoolDestroy", 11020, Slot::cuMemPoolDestroy, None),
    ("cuMemPoolTrimTo", 11020, Slot::cuMemPoolTrimTo, None),
    // CUDA 13: pools by location and allocation type.
    (
        "cuMemGetDefaultMemPool",
        13000,
        Slot::cuMemGetDefaultMemPool,
        None,
    ),
    ("cuMemGetMemPool", 13000, Slot::cuMemGetMemPool, None),
    (
        "cuMemAddressReserve",
        10020,
        Slot::cuMemAddressReserve,
        None,
    ),
    ("cuMemAddressFree", 10020, Slot::cuMemAddressFree, None),
    ("cuMemCreate", 10020, Slot::cuMemCreate, None),
    ("cuMemRelease", 10020, Slot::cuMemRelease, None),
    ("cuMemMap", 10020, Slot::cuMemMap, None),
    ("cuMemUnmap", 10020, Slot::cuMemUnmap, None),
    ("cuMemSetAccess", 10020, Slot::cuMemSetAccess, None),
    ("cuMemHostAlloc", 2020, Slot::cuMemHostAlloc, None),
    ("cuMemAllocHost", 3020, Slot::cuMemAllocHost_v2, None),
    ("cuMemFreeHost", 2000, Slot::cuMemFreeHost, None),
    ("cuMemHostRegister", 6050, Slot::cuMemHostRegister_v2, None),
    ("cuMemHostUnregister", 4000, Slot::cuMemHostUnregister, None),
    ("cuArrayCreate", 3020, Slot::cuArrayCreate_v2, None),
    ("cuArray3DCreate", 3020, Slot::cuArray3DCreate_v2, None),
    ("cuArrayDestroy", 2000, Slot::cuArrayDestroy, None),
    ("cuGetProcAddress", 12000, Slot::cuGetProcAddress_v2, None),
];

/// The variant a lookup of `base` at `version` with `flags` returns, when it is one
/// vramtrace wraps.
pub fn variant(base: &[u8], version: i32, flags: u64) -> Option<Slot> {
    let &(_, since, plain, per_thread) = VARIANTS.iter().find(|v| v.0.as_bytes() == base)?;
    if version < since {
        // cuGetProcAddress at 11030..12000 is the 4-argument form, also wrapped.
        return (base == b"cuGetProcAddress" && version >= 11030).then_some(Slot::cuGetProcAddress);
    }
    match per_thread {
        Some(v) if flags & PER_THREAD_DEFAULT_STREAM != 0 => Some(v),
        _ => Some(plain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_abis_are_never_wrapped() {
        assert_eq!(variant(b"cuMemAlloc", 2000, 0), None);
        assert_eq!(variant(b"cuMemAlloc", 3020, 0), Some(Slot::cuMemAlloc_v2));
        assert_eq!(variant(b"cuMemAlloc", 12090, 2), Some(Slot::cuMemAlloc_v2));
    }

    #[test]
    fn per_thread_stream_flag_selects_ptsz() {
        assert_eq!(
            variant(b"cuMemAllocAsync", 11020, 0),
            Some(Slot::cuMemAllocAsync)
        );
        assert_eq!(
            variant(b"cuMemAllocAsync", 11020, 2),
            Some(Slot::cuMemAllocAsync_ptsz)
        );
        assert_eq!(variant(b"cuMemAllocAsync", 11010, 2), None);
    }

    /// CUDA 13's lookups of versioned functions that take no memory (cudart 13.5 asks for
    /// each at two versions, whose ABIs differ: cuMemAdvise_v2 takes a location where
    /// cuMemAdvise took a device) are handed back untouched, by name or by version.
    #[test]
    fn cuda_13_versioned_variants_are_never_wrapped() {
        for (base, version) in [
            ("cuCtxCreate", 12050),
            ("cuMemAdvise", 12020),
            ("cuMemPrefetchAsync", 12020),
            ("cuDeviceGetUuid", 11040),
        ] {
            assert_eq!(variant(base.as_bytes(), version, 0), None, "{base}");
        }
        for name in [
            "cuCtxCreate_v4",
            "cuMemAdvise_v2",
            "cuMemPrefetchAsync_v2",
            "cuDeviceGetUuid_v2",
        ] {
            assert_eq!(Slot::find(name.as_bytes()), None, "{name}");
        }
    }

    /// CUDA 13's pools by location exist from 13000 only: an older version gets no
    /// wrapper (the symbol is not there to wrap).
    #[test]
    fn pools_by_location_are_wrapped_from_cuda_13() {
        for (base, slot) in [
            ("cuMemGetDefaultMemPool", Slot::cuMemGetDefaultMemPool),
            ("cuMemGetMemPool", Slot::cuMemGetMemPool),
        ] {
            assert_eq!(variant(base.as_bytes(), 12090, 0), None, "{base}");
            assert_eq!(variant(base.as_bytes(), 13000, 0), Some(slot), "{base}");
            assert_eq!(variant(base.as_bytes(), 13050, 2), Some(slot), "{base}");
        }
        assert_eq!(variant(b"cuMemSetMemPool", 13000, 0), None);
    }

    #[test]
    fn lookup_function_forms() {
        assert_eq!(
            variant(b"cuGetProcAddress", 11030, 0),
            Some(Slot::cuGetProcAddress)
        );
        assert_eq!(
            variant(b"cuGetProcAddress", 12000, 0),
            Some(Slot::cuGetProcAddress_v2)
        );
        assert_eq!(variant(b"cuGetProcAddress", 11020, 0), None);
        assert_eq!(variant(b"cudnnCreate", 12000, 0), None);
    }
}
