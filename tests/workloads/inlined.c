/* An allocation made in a helper that the compiler inlines into its caller (built with
 * -O2 -g): at run time the helper has no frame of its own, only the debug information's
 * record of the inlined call. Prints, besides its truth, one line
 *   VRAMTRACE_INLINED {"size":N,"functions":["reserve_buffer","layer_b","layer_a","main"]}
 * naming, innermost first, the source's call chain of the allocation. */
#include "wl.h"

#include "cuda_runtime_sim.h"

/* Keeps a call from becoming a tail call, so every real function keeps its frame. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

#define SIZE (5 * MiB + 5)

static inline __attribute__((always_inline)) void *reserve_buffer(size_t n) {
    void *p = NULL;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&p, n)));
    return p;
}

__attribute__((noipa)) static void *layer_b(size_t n) {
    void *p = reserve_buffer(n);
    KEEP_FRAME();
    return p;
}

__attribute__((noipa)) static void *layer_a(size_t n) {
    void *p = layer_b(n);
    KEEP_FRAME();
    return p;
}

int main(void) {
    truth_init("inlined");
    WL_CHECK(cudaSetDevice(0));
    void *p = layer_a(SIZE);
    printf("VRAMTRACE_INLINED {\"size\":%llu,\"functions\":"
           "[\"reserve_buffer\",\"layer_b\",\"layer_a\",\"main\"]}\n",
           SIZE);
    WL_CHECK(WL_FREE("cudaFree", 0, SIZE, cudaFree(p)));
    fflush(stdout);
    return 0;
}
