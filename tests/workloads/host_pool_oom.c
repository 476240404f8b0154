/* Workload host_pool_oom: an allocation from a host pool (CUDA 13) that the host cannot
 * give (more than the address space), beside a device allocation that succeeds. The
 * failure is of host memory, not of the device. */
#include "cuda_sim.h"
#include "wl.h"

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_PRIMARY_CONTEXT();
    CUdeviceptr d, h;
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 4 * MiB, cuMemAlloc_v2(&d, 4 * MiB)));
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemoryPool pool;
    WL_CHECK(WL_CALL("cuMemPoolCreate", "pool_create", 0, cuMemPoolCreate(&pool, &props)));
    size_t huge = (size_t)1 << 60;
    if (WL_CALL("cuMemAllocFromPoolAsync", "alloc", huge, cuMemAllocFromPoolAsync(&h, huge, pool, NULL)) !=
        CUDA_ERROR_OUT_OF_MEMORY)
        return 3;
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 4 * MiB, cuMemFree_v2(d)));
    WL_CHECK(WL_CALL("cuMemPoolDestroy", "pool_destroy", 0, cuMemPoolDestroy(pool)));
    return 0;
}
