/* libvt_xla_extension.so: named like jaxlib's xla_extension.so, it does what XLA's GPU
 * client does at start with its default settings: ask the driver for the card's memory
 * and take 75% of it in one allocation (XLA_PYTHON_CLIENT_MEM_FRACTION's default), in
 * which its BFC allocator then hands out the program's arrays without further CUDA
 * calls. Returns the bytes taken (0 on failure). */
#include "cuda_sim.h"
#include "wl.h"

static CUdeviceptr pool;

unsigned long long xla_preallocate(void) {
    size_t free_bytes = 0, total = 0;
    if (WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total))) return 0;
    truth_meminfo(free_bytes, total);
    unsigned long long bytes = total / 4 * 3;
    if (WL_ALLOC("cuMemAlloc_v2", 0, bytes, cuMemAlloc_v2(&pool, bytes))) return 0;
    return bytes;
}
