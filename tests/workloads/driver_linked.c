/* Workload driver_linked: linked with -lcuda (DT_NEEDED libcuda.so.1), calling the
 * exported driver functions by name, the one path an LD_PRELOADed symbol catches. */
#include "cuda_sim.h"
#include "wl.h"

int main(void) {
    truth_init(WORKLOAD_NAME);
    CUcontext ctx;
    WL_CHECK(cuInit(0));
    WL_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    WL_CHECK(cuCtxSetCurrent(ctx));

    size_t free_bytes, total;
    if (!WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    CUdeviceptr a, b, c, m;
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 32 * MiB, cuMemAlloc_v2(&a, 32 * MiB)));
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 512, cuMemAlloc_v2(&b, 512)));
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 100 * MiB, cuMemAlloc_v2(&c, 100 * MiB)));
    WL_CHECK(WL_ALLOC("cuMemAllocManaged", 0, 4 * MiB, cuMemAllocManaged(&m, 4 * MiB, CU_MEM_ATTACH_GLOBAL)));
    if (!WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 32 * MiB, cuMemFree_v2(a)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 100 * MiB, cuMemFree_v2(c)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 4 * MiB, cuMemFree_v2(m)));
    /* b (512 bytes) is left allocated: a leak the trace must show */
    if (!WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    WL_CHECK(cuDevicePrimaryCtxRelease_v2(0));
    return 0;
}
