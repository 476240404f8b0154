/* Workload jax_prealloc: a JAX program's start as the driver sees it. With argument
 * "xla", XLA's library (libvt_xla_extension.so) takes 75% of the card in one allocation;
 * with "plain", the program itself takes the same 75% from main, where no XLA code runs.
 * Then the program's own small allocations, and one allocation of a third of the card,
 * which cannot fit beside the 75% and fails. Prints
 *   JAX_PREALLOC {"bytes":..,"total":..}
 * with the bytes taken in one allocation and the card's total. */
#include "cuda_sim.h"
#include "wl.h"

#include <string.h>

unsigned long long xla_preallocate(void);

static unsigned long long plain_preallocate(size_t *total) {
    size_t free_bytes = 0;
    if (WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, total))) return 0;
    truth_meminfo(free_bytes, *total);
    unsigned long long bytes = *total / 4 * 3;
    CUdeviceptr p;
    if (WL_ALLOC("cuMemAlloc_v2", 0, bytes, cuMemAlloc_v2(&p, bytes))) return 0;
    return bytes;
}

int main(int argc, char **argv) {
    truth_init(WORKLOAD_NAME);
    int xla = argc < 2 || strcmp(argv[1], "plain");
    CUcontext ctx;
    WL_CHECK(cuInit(0));
    WL_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    WL_CHECK(cuCtxSetCurrent(ctx));
    size_t total = 0, free_bytes = 0;
    unsigned long long bytes = xla ? xla_preallocate() : plain_preallocate(&total);
    if (!bytes) exit(2);
    if (xla) WL_CHECK(cuMemGetInfo_v2(&free_bytes, &total));
    CUdeviceptr small[3], big = 0;
    for (int i = 0; i < 3; i++) WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 4 * MiB, cuMemAlloc_v2(&small[i], 4 * MiB)));
    if (WL_ALLOC("cuMemAlloc_v2", 0, total / 3, cuMemAlloc_v2(&big, total / 3)) != CUDA_ERROR_OUT_OF_MEMORY) exit(3);
    printf("JAX_PREALLOC {\"bytes\":%llu,\"total\":%zu}\n", bytes, total);
    return 0;
}
