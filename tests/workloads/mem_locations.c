/* Workload mem_locations: CUDA 13's memory pools by location and allocation type, and
 * cuMemCreate with host locations. Only the device pool's blocks and the device handle
 * are device memory; the host, host-NUMA and managed pools' blocks and the host handles
 * are counted by location (truth_location), never as live device bytes.
 * Linked with -lcuda; cuMemGetMemPool is looked up with cuGetProcAddress at 13000, as
 * NVIDIA's 13.x runtime asks for it. */
#include "cuda_sim.h"
#include "wl.h"

typedef CUresult (*get_pool_fn)(CUmemoryPool *, CUmemLocation *, int);

static CUmemPoolProps pool_props(int location, int id) {
    CUmemPoolProps p = {0};
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = location;
    p.location.id = id;
    return p;
}

static CUmemAllocationProp handle_props(int location, int id) {
    CUmemAllocationProp p = {0};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = location;
    p.location.id = id;
    return p;
}

/* An allocation from a pool whose memory is not on the device. */
static CUdeviceptr from_pool(CUmemoryPool pool, size_t size, const char *location) {
    CUdeviceptr p;
    WL_CHECK(WL_CALL("cuMemAllocFromPoolAsync", "alloc", size, cuMemAllocFromPoolAsync(&p, size, pool, NULL)));
    truth_location(location, (long long)size);
    return p;
}

static void free_to_pool(CUdeviceptr p, size_t size, const char *location) {
    WL_CHECK(WL_CALL("cuMemFreeAsync", "free", 0, cuMemFreeAsync(p, NULL)));
    truth_location(location, -(long long)size);
}

static CUmemGenericAllocationHandle host_handle(int location, int id, size_t size, const char *name) {
    CUmemAllocationProp prop = handle_props(location, id);
    CUmemGenericAllocationHandle h;
    WL_CHECK(WL_CALL("cuMemCreate", "create", size, cuMemCreate(&h, size, &prop, 0)));
    truth_location(name, (long long)size);
    return h;
}

static void release_host_handle(CUmemGenericAllocationHandle h, size_t size, const char *name) {
    WL_CHECK(WL_CALL("cuMemRelease", "release", 0, cuMemRelease(h)));
    truth_location(name, -(long long)size);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    CUcontext ctx;
    WL_CHECK(cuInit(0));
    WL_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    WL_CHECK(cuCtxSetCurrent(ctx));

    /* A device pool: device memory. */
    CUmemPoolProps props = pool_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemoryPool device_pool, host_pool;
    WL_CHECK(WL_CALL("cuMemPoolCreate", "pool_create", 0, cuMemPoolCreate(&device_pool, &props)));
    CUdeviceptr d;
    WL_CHECK(WL_ALLOC("cuMemAllocFromPoolAsync", 0, 8 * MiB, cuMemAllocFromPoolAsync(&d, 8 * MiB, device_pool, NULL)));

    /* A host pool the program makes, the host NUMA node 1's default pool, and the current
     * managed pool with no preferred location (found through cuGetProcAddress). */
    props = pool_props(CU_MEM_LOCATION_TYPE_HOST, 0);
    WL_CHECK(WL_CALL("cuMemPoolCreate", "pool_create", 0, cuMemPoolCreate(&host_pool, &props)));
    CUmemLocation numa1 = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 1};
    CUmemoryPool numa_pool, managed_pool;
    WL_CHECK(WL_CALL("cuMemGetDefaultMemPool", "pool_get", 0,
                     cuMemGetDefaultMemPool(&numa_pool, &numa1, CU_MEM_ALLOCATION_TYPE_PINNED)));
    get_pool_fn get_mem_pool = NULL;
    CUdriverProcAddressQueryResult found;
    WL_CHECK(cuGetProcAddress_v2("cuMemGetMemPool", (void **)&get_mem_pool, 13000, 0, &found));
    if (!get_mem_pool) return 2;
    CUmemLocation nowhere = {.type = CU_MEM_LOCATION_TYPE_NONE, .id = 0};
    WL_CHECK(WL_CALL("cuMemGetMemPool", "pool_get", 0, get_mem_pool(&managed_pool, &nowhere, CU_MEM_ALLOCATION_TYPE_MANAGED)));

    CUdeviceptr h1 = from_pool(host_pool, 16 * MiB, "host");
    CUdeviceptr n1 = from_pool(numa_pool, 4 * MiB, "host_numa");
    CUdeviceptr m1 = from_pool(managed_pool, 32 * MiB, "managed");
    CUdeviceptr m2 = from_pool(managed_pool, 6 * MiB, "managed");

    /* Physical allocations: on the host, on NUMA node 0, on the calling thread's node,
     * and one on the device. */
    CUmemGenericAllocationHandle hh = host_handle(CU_MEM_LOCATION_TYPE_HOST, 0, 6 * MiB, "host");
    CUmemGenericAllocationHandle nh = host_handle(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 4 * MiB, "host_numa");
    CUmemGenericAllocationHandle ch =
        host_handle(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, 2 * MiB, "host_numa_current");
    CUmemAllocationProp on_device = handle_props(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle dh;
    WL_CHECK(WL_ALLOC_OP("cuMemCreate", "create", 0, 2 * MiB, cuMemCreate(&dh, 2 * MiB, &on_device, 0)));

    /* Peaks reached: host 22, host_numa 8, host_numa_current 2, managed 38 MiB; device 10 MiB. */
    free_to_pool(h1, 16 * MiB, "host");
    free_to_pool(m1, 32 * MiB, "managed");
    release_host_handle(hh, 6 * MiB, "host");
    release_host_handle(ch, 2 * MiB, "host_numa_current");
    WL_CHECK(WL_FREE("cuMemFreeAsync", 0, 8 * MiB, cuMemFreeAsync(d, NULL)));
    WL_CHECK(WL_CALL("cuMemRelease", "release", 0, cuMemRelease(dh)));
    truth_live_sub(0, 2 * MiB); /* never mapped: released, it is gone */
    WL_CHECK(WL_CALL("cuMemPoolDestroy", "pool_destroy", 0, cuMemPoolDestroy(host_pool)));
    /* Left at the end: host_numa 8 MiB (n1, nh), managed 6 MiB (m2). */
    (void)n1;
    (void)nh;
    (void)m2;
    WL_CHECK(cuDevicePrimaryCtxRelease_v2(0));
    return 0;
}
