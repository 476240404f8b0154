/* Workload hold: takes argv[1] GiB of device 0 in 1-GiB blocks and ends holding them, as
 * a job that leaves its tensors to the driver does. With argv[2] = N > 0 it then execs
 * itself with N - 1: an exec chain of N + 1 images, each holding its own memory (the
 * driver frees an image's memory at exec). Each image prints its own truth first (exec
 * runs no atexit handler). */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    truth_init(WORKLOAD_NAME);
    long gib = argc > 1 ? atol(argv[1]) : 1;
    long chain = argc > 2 ? atol(argv[2]) : 0;
    WL_CHECK(cudaSetDevice(0));
    for (long i = 0; i < gib; i++) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, GiB, cudaMalloc(&p, GiB)));
    }
    if (chain > 0) {
        truth_print();
        fflush(stdout);
        char next[32];
        snprintf(next, sizeof next, "%ld", chain - 1);
        char *args[] = {argv[0], argv[1], next, NULL};
        execv("/proc/self/exe", args);
        return 127;
    }
    return 0;
}
