/* Workloads runtime_locations_dynamic / _static (CUDA 13 runtime): pools by location
 * through the runtime - a host NUMA pool made with cudaMemPoolCreate, the managed
 * default pool and the host's current pool - with cudaMallocFromPoolAsync, beside a
 * device pool. The static runtime's calls are seen at the driver (the harness maps the
 * names). Only the device pool's blocks are live device bytes; the rest is counted by
 * location. */
#include "cuda_runtime_sim.h"
#include "wl.h"

static void *from_pool(cudaMemPool_t pool, size_t size, const char *location) {
    void *p;
    WL_CHECK(WL_CALL("cudaMallocFromPoolAsync", "alloc", size, cudaMallocFromPoolAsync(&p, size, pool, NULL)));
    truth_location(location, (long long)size);
    return p;
}

static void free_to_pool(void *p, size_t size, const char *location) {
    WL_CHECK(WL_CALL("cudaFreeAsync", "free", 0, cudaFreeAsync(p, NULL)));
    truth_location(location, -(long long)size);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));

    cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t device_pool, numa_pool, managed_pool, host_pool;
    WL_CHECK(WL_CALL("cudaMemPoolCreate", "pool_create", 0, cudaMemPoolCreate(&device_pool, &props)));
    props.location.type = cudaMemLocationTypeHostNuma;
    props.location.id = 1;
    WL_CHECK(WL_CALL("cudaMemPoolCreate", "pool_create", 0, cudaMemPoolCreate(&numa_pool, &props)));
    cudaMemLocation nowhere = {.type = cudaMemLocationTypeNone}, host = {.type = cudaMemLocationTypeHost};
    WL_CHECK(WL_CALL("cudaMemGetDefaultMemPool", "pool_get", 0,
                     cudaMemGetDefaultMemPool(&managed_pool, &nowhere, cudaMemAllocationTypeManaged)));
    WL_CHECK(WL_CALL("cudaMemGetMemPool", "pool_get", 0,
                     cudaMemGetMemPool(&host_pool, &host, cudaMemAllocationTypePinned)));

    void *d;
    WL_CHECK(WL_ALLOC("cudaMallocFromPoolAsync", 0, 12 * MiB, cudaMallocFromPoolAsync(&d, 12 * MiB, device_pool, NULL)));
    void *n = from_pool(numa_pool, 10 * MiB, "host_numa");
    void *m = from_pool(managed_pool, 20 * MiB, "managed");
    void *h = from_pool(host_pool, 6 * MiB, "host");
    free_to_pool(m, 20 * MiB, "managed");
    free_to_pool(h, 6 * MiB, "host");
    void *m2 = from_pool(managed_pool, 4 * MiB, "managed");
    WL_CHECK(WL_FREE("cudaFreeAsync", 0, 12 * MiB, cudaFreeAsync(d, NULL)));
    /* Left at the end: host_numa 10 MiB, managed 4 MiB. */
    (void)n;
    (void)m2;
    return 0;
}
