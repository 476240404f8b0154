/* Workload unread_props: calls the driver rejects before it reads their properties or
 * location - a cuMemCreate whose size is no multiple of the granularity, a cuMemPoolCreate
 * and a cuMemGetDefaultMemPool with no place for the pool - each given a pointer that
 * nothing may read. The driver answers INVALID_VALUE without touching it; the program
 * must get that answer, traced or not. */
#include "cuda_sim.h"
#include "wl.h"

#include <stdint.h>

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cuInit(0));

    /* The first page is never mapped. */
    const void *unreadable = (const void *)(uintptr_t)16;
    CUmemGenericAllocationHandle h;
    if (WL_CALL("cuMemCreate", "create", 3, cuMemCreate(&h, 3, unreadable, 0)) != CUDA_ERROR_INVALID_VALUE)
        return 3;
    if (WL_CALL("cuMemPoolCreate", "pool_create", 0, cuMemPoolCreate(NULL, unreadable)) != CUDA_ERROR_INVALID_VALUE)
        return 4;
    if (WL_CALL("cuMemGetDefaultMemPool", "pool_get", 0,
                cuMemGetDefaultMemPool(NULL, (CUmemLocation *)unreadable, CU_MEM_ALLOCATION_TYPE_PINNED)) !=
        CUDA_ERROR_INVALID_VALUE)
        return 5;
    return 0;
}
