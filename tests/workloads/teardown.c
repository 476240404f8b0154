/* Workload teardown: memory calls where a process is least ready for them, each counted
 * in the truth like any other call:
 * - before cuInit: cuMemAlloc_v2 and cuMemGetInfo_v2 (both fail: not initialised), and
 *   cuMemAlloc_v2 looked up through cuGetProcAddress_v2 before cuInit, called after it;
 * - threads that allocate as the very first thing they do, free right before
 *   pthread_exit, and free in a pthread key destructor (while the thread is exiting);
 * - an atexit handler that frees (registered after truth_init, so it runs before the
 *   truth is printed; the interposer's end record comes later still).
 * Linked with -lcuda: every call goes to the exported driver functions. */
#include "cuda_sim.h"
#include "wl.h"

#include <pthread.h>

#define THREADS 8

static CUcontext ctx;
static pthread_key_t key;
static CUdeviceptr at_exit_block;

static void key_destructor(void *p) {
    CUdeviceptr block = (CUdeviceptr)(size_t)p;
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 3 * MiB, cuMemFree_v2(block)));
}

static void *worker(void *arg) {
    CUdeviceptr first, in_key, last;
    (void)arg;
    WL_CHECK(cuCtxSetCurrent(ctx));
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 1 * MiB, cuMemAlloc_v2(&first, 1 * MiB)));
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 3 * MiB, cuMemAlloc_v2(&in_key, 3 * MiB)));
    pthread_setspecific(key, (void *)(size_t)in_key);
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 2 * MiB, cuMemAlloc_v2(&last, 2 * MiB)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 1 * MiB, cuMemFree_v2(first)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 2 * MiB, cuMemFree_v2(last)));
    pthread_exit(NULL);
}

static void free_at_exit(void) {
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 5 * MiB, cuMemFree_v2(at_exit_block)));
}

int main(void) {
    truth_init(WORKLOAD_NAME);

    CUdeviceptr early = 0;
    size_t free_bytes = 0, total = 0;
    if (WL_ALLOC("cuMemAlloc_v2", 0, 4096, cuMemAlloc_v2(&early, 4096)) != CUDA_ERROR_NOT_INITIALIZED) exit(3);
    if (WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)) != CUDA_ERROR_NOT_INITIALIZED)
        exit(3);
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    CUdriverProcAddressQueryResult status;
    WL_CHECK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 12000, 0, &status));
    if (!alloc) exit(3);

    WL_CHECK(cuInit(0));
    WL_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    WL_CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr looked_up;
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 7 * MiB, alloc(&looked_up, 7 * MiB)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 7 * MiB, cuMemFree_v2(looked_up)));

    if (pthread_key_create(&key, key_destructor)) exit(2);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, NULL)) exit(2);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);

    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 5 * MiB, cuMemAlloc_v2(&at_exit_block, 5 * MiB)));
    atexit(free_at_exit);
    return 0;
}
