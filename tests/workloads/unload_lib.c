/* A library of the unload workload, built twice (UNLOAD_NAME a and b) from this one
 * source, so both load at the same place when one replaces the other: each allocates
 * through its own function. */
#include "cuda_runtime_sim.h"
#include <stddef.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

__attribute__((noinline)) int CAT(unload_alloc_, UNLOAD_NAME)(void **p, size_t n) {
    int e = cudaMalloc(p, n);
    __asm__ volatile("" ::: "memory");
    return e;
}
