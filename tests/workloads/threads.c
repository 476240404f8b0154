/* Workload threads: N threads (argv[1], default 16) x M cudaMalloc/cudaFree pairs
 * (argv[2], default 100000) of sizes 512 * (1 + i % 64), through the dynamic runtime.
 * Each thread calls cudaSetDevice(0) itself, as a worker thread must, then waits for the
 * others, so that their first allocations come together (what a hook does once, on its
 * first call, is raced by every thread). The peak is only known between bounds (peak_live_bytes .. peak_live_bytes_upper, see truth.h). */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <pthread.h>

static long iterations = 100000;
static pthread_barrier_t started;

static void *worker(void *arg) {
    (void)arg;
    WL_CHECK(cudaSetDevice(0));
    pthread_barrier_wait(&started);
    for (long i = 0; i < iterations; i++) {
        size_t size = 512 * (size_t)(1 + i % 64);
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, size, cudaMalloc(&p, size)));
        WL_CHECK(WL_FREE("cudaFree", 0, size, cudaFree(p)));
    }
    return NULL;
}

int main(int argc, char **argv) {
    truth_init(WORKLOAD_NAME);
    int n = argc > 1 ? atoi(argv[1]) : 16;
    if (argc > 2) iterations = atol(argv[2]);
    if (n < 1 || n > 1024 || iterations < 0) {
        fprintf(stderr, "usage: threads [threads] [alloc/free pairs per thread]\n");
        return 2;
    }
    if (pthread_barrier_init(&started, NULL, (unsigned)n)) return 2;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, worker, NULL)) return 2;
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
    return 0;
}
