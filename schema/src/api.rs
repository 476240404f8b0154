//! Every API the interposer records, with the operation it performs and the kind of
//! memory it touches. The API name alone fixes both, so a trace line carries only the
//! name (`"api":"cudaMalloc"`) and readers derive the rest from this table.

/// What a call does to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Takes memory (device, managed, pool, pinned host or array).
    Alloc,
    /// Returns memory taken by an `Alloc`, found by address.
    Free,
    /// `cuMemGetInfo`: the free/total the driver reported to the program.
    Meminfo,
    PoolCreate,
    /// `cuMemGetDefaultMemPool`/`cuMemGetMemPool`: a pool handle for a location and an
    /// allocation type (CUDA 13); `pool` and `loc` say which.
    PoolGet,
    PoolDestroy,
    PoolTrim,
    /// Virtual address range reserved (no physical memory).
    Reserve,
    Unreserve,
    /// Physical memory handle created (`cuMemCreate`): counted from here...
    Create,
    /// ...until the handle is released and its last mapping is gone.
    Release,
    Map,
    Unmap,
    SetAccess,
    HostRegister,
    HostUnregister,
    /// An allocator handed out a block inside memory it reserved (annotation).
    BlockAlloc,
    /// An allocator took a block back (annotation).
    BlockFree,
    /// A named point or phase (annotation).
    Marker,
    /// What NVML said of a device and of this process (the device layer).
    DeviceSample,
}

/// The kind of memory an API deals in. Only device kinds count as reserved device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `cuMemAlloc`, `cudaMalloc`, pitch allocations.
    Device,
    /// `cuMemAllocManaged`: unified memory, counted against the device it was made on.
    Managed,
    /// Stream-ordered allocations from a memory pool.
    Pool,
    /// Virtual-memory physical handles (`cuMemCreate`), PyTorch's expandable segments.
    Physical,
    /// CUDA arrays (textures).
    Array,
    /// Page-locked host memory: reported apart, never device memory.
    Host,
    /// Allocations from a managed (unified memory) pool, CUDA 13: reported apart, never
    /// device memory. A pool event's `loc` decides it, not the API.
    ManagedPool,
    /// Address space only (`cuMemAddressReserve`), no memory behind it.
    Va,
    /// Calls that hold no memory themselves (`cuMemGetInfo`, pool management).
    Info,
    /// Blocks an allocator hands out inside reserved memory: the allocated layer.
    Allocated,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Device,
        Kind::Managed,
        Kind::Pool,
        Kind::Physical,
        Kind::Array,
        Kind::Host,
        Kind::ManagedPool,
        Kind::Va,
        Kind::Info,
        Kind::Allocated,
    ];

    /// Whether bytes of this kind are device memory the process holds from the driver.
    pub fn is_device_memory(self) -> bool {
        matches!(
            self,
            Kind::Device | Kind::Managed | Kind::Pool | Kind::Physical | Kind::Array
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Managed => "managed",
            Kind::Pool => "pool",
            Kind::Physical => "physical",
            Kind::Array => "array",
            Kind::Host => "host",
            Kind::ManagedPool => "managed_pool",
            Kind::Va => "va",
            Kind::Info => "info",
            Kind::Allocated => "allocated",
        }
    }
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Alloc => "alloc",
            Op::Free => "free",
            Op::Meminfo => "meminfo",
            Op::PoolCreate => "pool_create",
            Op::PoolGet => "pool_get",
            Op::PoolDestroy => "pool_destroy",
            Op::PoolTrim => "pool_trim",
            Op::Reserve => "reserve",
            Op::Unreserve => "unreserve",
            Op::Create => "create",
            Op::Release => "release",
            Op::Map => "map",
            Op::Unmap => "unmap",
            Op::SetAccess => "set_access",
            Op::HostRegister => "host_register",
            Op::HostUnregister => "host_unregister",
            Op::BlockAlloc => "block_alloc",
            Op::BlockFree => "block_free",
            Op::Marker => "marker",
            Op::DeviceSample => "device_sample",
        }
    }
}

macro_rules! apis {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $op:ident, $kind:ident, $layer:ident; )*) => {
        /// A recorded entry point, named exactly as the exported CUDA symbol.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Api { $( $(#[$doc])* $variant, )* }

        impl Api {
            /// Every API, in table order.
            pub const ALL: &'static [Api] = &[ $( Api::$variant, )* ];

            /// The exact symbol name, as it appears in traces.
            pub fn name(self) -> &'static str {
                match self { $( Api::$variant => $name, )* }
            }

            pub fn op(self) -> Op {
                match self { $( Api::$variant => Op::$op, )* }
            }

            pub fn kind(self) -> Kind {
                match self { $( Api::$variant => Kind::$kind, )* }
            }

            /// Whether vramtrace wrote this record itself (not a call the program made).
            pub fn is_vramtrace(self) -> bool {
                match self { $( Api::$variant => Layer::$layer == Layer::Vramtrace, )* }
            }

            /// Whether this is a runtime (`cuda*`) rather than a driver (`cu*`) entry point.
            pub fn is_runtime(self) -> bool {
                match self { $( Api::$variant => Layer::$layer == Layer::Runtime, )* }
            }

            /// The API with this exact symbol name, if it is one vramtrace records.
            pub fn from_name(name: &str) -> Option<Api> {
                match name { $( $name => Some(Api::$variant), )* _ => None }
            }
        }
    };
}

#[derive(PartialEq, Eq)]
enum Layer {
    Driver,
    Runtime,
    /// Records vramtrace makes itself: annotations from allocators, NVML samples, probes.
    Vramtrace,
}

apis! {
    CuMemAlloc_v2 = "cuMemAlloc_v2", Alloc, Device, Driver;
    CuMemAllocPitch_v2 = "cuMemAllocPitch_v2", Alloc, Device, Driver;
    CuMemFree_v2 = "cuMemFree_v2", Free, Device, Driver;
    CuMemAllocManaged = "cuMemAllocManaged", Alloc, Managed, Driver;
    CuMemAllocAsync = "cuMemAllocAsync", Alloc, Pool, Driver;
    CuMemAllocAsync_ptsz = "cuMemAllocAsync_ptsz", Alloc, Pool, Driver;
    CuMemAllocFromPoolAsync = "cuMemAllocFromPoolAsync", Alloc, Pool, Driver;
    CuMemAllocFromPoolAsync_ptsz = "cuMemAllocFromPoolAsync_ptsz", Alloc, Pool, Driver;
    CuMemFreeAsync = "cuMemFreeAsync", Free, Pool, Driver;
    CuMemFreeAsync_ptsz = "cuMemFreeAsync_ptsz", Free, Pool, Driver;
    CuMemPoolCreate = "cuMemPoolCreate", PoolCreate, Info, Driver;
    CuMemPoolDestroy = "cuMemPoolDestroy", PoolDestroy, Info, Driver;
    CuMemPoolTrimTo = "cuMemPoolTrimTo", PoolTrim, Info, Driver;
    CuMemGetDefaultMemPool = "cuMemGetDefaultMemPool", PoolGet, Info, Driver;
    CuMemGetMemPool = "cuMemGetMemPool", PoolGet, Info, Driver;
    CuMemAddressReserve = "cuMemAddressReserve", Reserve, Va, Driver;
    CuMemAddressFree = "cuMemAddressFree", Unreserve, Va, Driver;
    CuMemCreate = "cuMemCreate", Create, Physical, Driver;
    CuMemRelease = "cuMemRelease", Release, Physical, Driver;
    CuMemMap = "cuMemMap", Map, Physical, Driver;
    CuMemUnmap = "cuMemUnmap", Unmap, Physical, Driver;
    CuMemSetAccess = "cuMemSetAccess", SetAccess, Physical, Driver;
    CuMemHostAlloc = "cuMemHostAlloc", Alloc, Host, Driver;
    CuMemAllocHost_v2 = "cuMemAllocHost_v2", Alloc, Host, Driver;
    CuMemFreeHost = "cuMemFreeHost", Free, Host, Driver;
    CuMemHostRegister_v2 = "cuMemHostRegister_v2", HostRegister, Host, Driver;
    CuMemHostUnregister = "cuMemHostUnregister", HostUnregister, Host, Driver;
    CuArrayCreate_v2 = "cuArrayCreate_v2", Alloc, Array, Driver;
    CuArray3DCreate_v2 = "cuArray3DCreate_v2", Alloc, Array, Driver;
    CuArrayDestroy = "cuArrayDestroy", Free, Array, Driver;
    CuMemGetInfo_v2 = "cuMemGetInfo_v2", Meminfo, Info, Driver;
    CudaMalloc = "cudaMalloc", Alloc, Device, Runtime;
    CudaMallocPitch = "cudaMallocPitch", Alloc, Device, Runtime;
    CudaFree = "cudaFree", Free, Device, Runtime;
    CudaMallocManaged = "cudaMallocManaged", Alloc, Managed, Runtime;
    CudaMallocAsync = "cudaMallocAsync", Alloc, Pool, Runtime;
    CudaMallocFromPoolAsync = "cudaMallocFromPoolAsync", Alloc, Pool, Runtime;
    CudaFreeAsync = "cudaFreeAsync", Free, Pool, Runtime;
    CudaMemPoolCreate = "cudaMemPoolCreate", PoolCreate, Info, Runtime;
    CudaMemPoolDestroy = "cudaMemPoolDestroy", PoolDestroy, Info, Runtime;
    CudaMemPoolTrimTo = "cudaMemPoolTrimTo", PoolTrim, Info, Runtime;
    CudaMemGetDefaultMemPool = "cudaMemGetDefaultMemPool", PoolGet, Info, Runtime;
    CudaMemGetMemPool = "cudaMemGetMemPool", PoolGet, Info, Runtime;
    CudaMallocHost = "cudaMallocHost", Alloc, Host, Runtime;
    CudaHostAlloc = "cudaHostAlloc", Alloc, Host, Runtime;
    CudaFreeHost = "cudaFreeHost", Free, Host, Runtime;
    CudaMemGetInfo = "cudaMemGetInfo", Meminfo, Info, Runtime;
    VramtraceBlockAlloc = "vramtrace_block_alloc", BlockAlloc, Allocated, Vramtrace;
    VramtraceBlockFree = "vramtrace_block_free", BlockFree, Allocated, Vramtrace;
    VramtraceMarker = "vramtrace_marker", Marker, Info, Vramtrace;
    /// NVML, sampled: `dev` is the NVML index, `free`/`total` the device's, `size` this
    /// process's used bytes (`res` 1: this process was not in NVML's list).
    NvmlSample = "nvml_sample", DeviceSample, Info, Vramtrace;
    /// vramtrace's own `cuMemGetInfo` right after a failed allocation, in the failing
    /// thread's context.
    ProbeMeminfo = "vramtrace_probe_meminfo", Meminfo, Info, Vramtrace;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &api in Api::ALL {
            assert!(seen.insert(api.name()), "duplicate name {}", api.name());
            assert_eq!(Api::from_name(api.name()), Some(api));
        }
        assert_eq!(
            Api::from_name("cuMemAlloc"),
            None,
            "the 32-bit ABI is not recorded"
        );
    }

    #[test]
    fn layers_follow_the_symbol_prefix() {
        for &api in Api::ALL {
            assert_eq!(api.is_runtime(), api.name().starts_with("cuda"), "{api:?}");
            assert_eq!(api.is_vramtrace(), !api.name().starts_with("cu"), "{api:?}");
        }
    }
}
