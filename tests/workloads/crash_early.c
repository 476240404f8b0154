/* Workload crash_early: three cudaMalloc calls, its truth printed, then at once (well
 * within vramtrace's first flush interval) a crash: SIGSEGV by a write through NULL, or
 * SIGABRT by abort() when argv[1] is "abort". */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    for (int i = 1; i <= 3; i++) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, i * MiB, cudaMalloc(&p, i * MiB)));
    }
    truth_print();
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "abort") == 0) abort();
    *(volatile int *)(argc > 1000 ? (void *)argv : NULL) = 1;
    return 0;
}
