/* Benchmark program (scripts/bench.sh): a loop of alloc/free pairs at a chosen call-stack
 * depth, timed from inside, so that a tool's start-up and shutdown do not count.
 *
 *   bench_calls cuda|malloc DEPTH PAIRS
 *
 * cuda: cudaMalloc/cudaFree of 4096 bytes through the (simulated) dynamic runtime;
 * malloc: malloc/free of 4096 bytes (what heaptrack records). The loop runs DEPTH frames
 * below main (the stack a profiler would walk: backtrace() counts it), after a warm-up of
 * PAIRS/10 pairs. Prints: `frames N calls C ns_per_call X` (one call = one alloc or free). */
#include "cuda_runtime_sim.h"

#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int use_cuda;
static volatile size_t sink;

static unsigned long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void pairs(long n) {
    for (long i = 0; i < n; i++) {
        void *p = NULL;
        if (use_cuda) {
            if (cudaMalloc(&p, 4096) || cudaFree(p)) exit(2);
        } else {
            p = malloc(4096);
            if (!p) exit(2);
            sink += (size_t)p;
            free(p);
        }
    }
}

static void __attribute__((noinline)) at_depth(int depth, long n, unsigned long long *ns, int *frames) {
    if (depth > 1) {
        at_depth(depth - 1, n, ns, frames);
        sink += (size_t)depth; /* keeps the recursion from becoming a loop */
        return;
    }
    void *bt[256];
    *frames = backtrace(bt, 256);
    pairs(n / 10 + 1);
    unsigned long long t0 = mono_ns();
    pairs(n);
    *ns = mono_ns() - t0;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "cuda") && strcmp(argv[1], "malloc"))) {
        fprintf(stderr, "usage: bench_calls cuda|malloc DEPTH PAIRS\n");
        return 2;
    }
    use_cuda = !strcmp(argv[1], "cuda");
    int depth = atoi(argv[2]);
    long n = atol(argv[3]);
    if (depth < 1 || depth > 200 || n < 1) return 2;
    if (use_cuda && cudaSetDevice(0)) return 2;
    unsigned long long ns = 0;
    int frames = 0;
    at_depth(depth, n, &ns, &frames);
    /* frames counts at_depth's own frames, main and libc's start-up frames */
    printf("frames %d calls %ld ns_per_call %.1f\n", frames + 1, 2 * n, (double)ns / (double)(2 * n));
    return 0;
}
