/* Workload grow: the weights (argv[1] MiB) and the activations (argv[2] MiB), each
 * allocated from a function of its own, held together at the peak, then freed. Run
 * twice with other sizes, it is what `vramtrace diff` must explain: which call site grew,
 * and by how many bytes (its truth names each allocation's size). The weights are
 * loaded in a phase "load", the activations made and freed in a phase "forward", argv[3]
 * times (1). */
#include "cuda_runtime_sim.h"
#include "vramtrace.h"
#include "wl.h"

#include <stdlib.h>

/* Keeps a call from becoming a tail call, so every function keeps its frame. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) static void *load_weights(size_t n) {
    void *p = NULL;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&p, n)));
    KEEP_FRAME();
    return p;
}

__attribute__((noinline)) static void *forward_activations(size_t n) {
    void *p = NULL;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&p, n)));
    KEEP_FRAME();
    return p;
}

static void marker(const char *name) {
    vramtrace_marker_hint(name);
    truth_call("vramtrace_marker", "marker", 1, 0);
}

int main(int argc, char **argv) {
    truth_init(WORKLOAD_NAME);
    size_t weights = (size_t)(argc > 1 ? atol(argv[1]) : 64) * MiB;
    size_t activations = (size_t)(argc > 2 ? atol(argv[2]) : 32) * MiB;
    int steps = argc > 3 ? atoi(argv[3]) : 1;
    WL_CHECK(cudaSetDevice(0));
    marker("load");
    void *w = load_weights(weights);
    marker("/load");
    for (int s = 0; s < steps; s++) {
        marker("forward");
        void *a = forward_activations(activations);
        marker("/forward");
        WL_CHECK(WL_FREE("cudaFree", 0, activations, cudaFree(a)));
    }
    WL_CHECK(WL_FREE("cudaFree", 0, weights, cudaFree(w)));
    return 0;
}
