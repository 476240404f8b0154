/* Workloads runtime_dynamic (linked with libcudart.so.12) and runtime_static (linked
 * with libcudart_static.a, so the executable has no cudaMalloc to interpose): every
 * runtime allocation family once, two cudaMemGetInfo, one failed cudaMalloc, one
 * cudaFree of a pointer never allocated, and one leak of LEAK_BYTES. */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <string.h>

#define LEAK_BYTES (7 * MiB + 3)

/* Returns the card's total; every pair the runtime answers is part of the truth. */
static size_t meminfo(void) {
    size_t free_bytes = 0, total = 0;
    if (!WL_CALL("cudaMemGetInfo", "meminfo", 0, cudaMemGetInfo(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    return total;
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    int count = 0;
    WL_CHECK(cudaGetDeviceCount(&count));
    WL_CHECK(cudaSetDevice(0));
    /* the classic "initialise CUDA" call: a free of NULL, recorded as a (successful) free */
    WL_FREE("cudaFree", 0, 0, cudaFree(NULL));
    truth_runtime_only();
    meminfo();

    static const size_t sizes[] = {256, 4096, 1 * MiB, 3 * MiB + 17, 64 * MiB, 1 * GiB};
    void *blocks[6];
    for (int i = 0; i < 6; i++) WL_CHECK(WL_ALLOC("cudaMalloc", 0, sizes[i], cudaMalloc(&blocks[i], sizes[i])));
    void *leak;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, LEAK_BYTES, cudaMalloc(&leak, LEAK_BYTES)));
    WL_CHECK(cudaMemset(blocks[2], 0xab, sizes[2]));
    char check[16];
    WL_CHECK(cudaMemcpy(check, blocks[2], sizeof check, cudaMemcpyDeviceToHost));
    if (check[0] != (char)0xab) exit(3);

    void *managed;
    WL_CHECK(WL_ALLOC("cudaMallocManaged", 0, 8 * MiB, cudaMallocManaged(&managed, 8 * MiB, cudaMemAttachGlobal)));

    /* 1000-byte rows pad to a 1024-byte pitch: 300 rows are 307200 bytes */
    void *pitched;
    size_t pitch = 0;
    WL_CHECK(WL_CALL("cudaMallocPitch", "alloc", 1024 * 300, cudaMallocPitch(&pitched, &pitch, 1000, 300)));
    if (pitch != 1024) exit(3);
    truth_live_add(0, pitch * 300);

    void *host1, *host2;
    WL_CHECK(WL_CALL("cudaMallocHost", "alloc", 1 * MiB, cudaMallocHost(&host1, 1 * MiB)));
    WL_CHECK(WL_CALL("cudaHostAlloc", "alloc", 2 * MiB, cudaHostAlloc(&host2, 2 * MiB, cudaHostAllocDefault)));
    memset(host1, 1, 1 * MiB); /* pinned host memory is real memory */

    cudaStream_t stream;
    WL_CHECK(cudaStreamCreate(&stream));
    void *async1, *async2;
    WL_CHECK(WL_ALLOC("cudaMallocAsync", 0, 5 * MiB, cudaMallocAsync(&async1, 5 * MiB, stream)));
    WL_CHECK(WL_ALLOC("cudaMallocAsync", 0, 1000, cudaMallocAsync(&async2, 1000, stream)));
    meminfo(); /* at the peak: everything above is live */
    WL_CHECK(WL_FREE("cudaFreeAsync", 0, 5 * MiB, cudaFreeAsync(async1, stream)));
    WL_CHECK(WL_FREE("cudaFreeAsync", 0, 1000, cudaFreeAsync(async2, stream)));
    WL_CHECK(cudaStreamSynchronize(stream));

    cudaMemPool_t pool;
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    WL_CHECK(WL_CALL("cudaMemPoolCreate", "pool_create", 0, cudaMemPoolCreate(&pool, &props)));
    void *pooled;
    WL_CHECK(WL_ALLOC("cudaMallocFromPoolAsync", 0, 3 * MiB, cudaMallocFromPoolAsync(&pooled, 3 * MiB, pool, stream)));
    WL_CHECK(WL_FREE("cudaFreeAsync", 0, 3 * MiB, cudaFreeAsync(pooled, stream)));
    WL_CHECK(WL_CALL("cudaMemPoolTrimTo", "pool_trim", 0, cudaMemPoolTrimTo(pool, 0)));
    WL_CHECK(WL_CALL("cudaMemPoolDestroy", "pool_destroy", 0, cudaMemPoolDestroy(pool)));
    WL_CHECK(cudaStreamDestroy(stream));

    for (int i = 0; i < 6; i++) WL_CHECK(WL_FREE("cudaFree", 0, sizes[i], cudaFree(blocks[i])));
    WL_CHECK(WL_FREE("cudaFree", 0, 8 * MiB, cudaFree(managed)));
    WL_CHECK(WL_FREE("cudaFree", 0, pitch * 300, cudaFree(pitched)));
    WL_CHECK(WL_CALL("cudaFreeHost", "free", 0, cudaFreeHost(host1)));
    WL_CHECK(WL_CALL("cudaFreeHost", "free", 0, cudaFreeHost(host2)));

    /* the two expected failures */
    size_t total = meminfo();
    void *too_big = NULL;
    if (WL_ALLOC("cudaMalloc", 0, 2 * total, cudaMalloc(&too_big, 2 * total)) != cudaErrorMemoryAllocation) exit(3);
    if (too_big) exit(3); /* a failed allocation leaves the pointer alone */
    if (WL_FREE("cudaFree", 0, 0, cudaFree((void *)0x1234000)) != cudaErrorInvalidValue) exit(3);
    cudaGetLastError();
    return 0;
}
