/* Allocations from known call chains, for the stack tests: distinct functions at known
 * depths, built with debug information. Prints, besides its truth, one line
 *   VRAMTRACE_CHAINS [{"size":N,"functions":["innermost", ..., "main"]}, ...]
 * naming, innermost first, the functions on the stack of each allocation of that size. */
#include "wl.h"

#include "cuda_runtime_sim.h"
#include <pthread.h>

/* Keeps a call from becoming a tail call, so every function keeps its frame. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) static void *chain_leaf(size_t n) {
    void *p = NULL;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&p, n)));
    KEEP_FRAME();
    return p;
}

__attribute__((noinline)) static void *chain_mid_a(size_t n) {
    void *p = chain_leaf(n);
    KEEP_FRAME();
    return p;
}

__attribute__((noinline)) static void *chain_mid_b(size_t n) {
    void *p = chain_leaf(n);
    KEEP_FRAME();
    return p;
}

__attribute__((noinline)) static void *chain_root(size_t n, int which) {
    void *p = which ? chain_mid_b(n) : chain_mid_a(n);
    KEEP_FRAME();
    return p;
}

__attribute__((noinline)) static void *chain_recurse(size_t n, int depth) {
    void *p = depth ? chain_recurse(n, depth - 1) : chain_leaf(n);
    KEEP_FRAME();
    return p;
}

#define SIZE_A (1 * MiB + 1)
#define SIZE_B (2 * MiB + 2)
#define SIZE_DEEP (3 * MiB + 3)
#define SIZE_THREAD (4 * MiB + 4)
#define DEEP 20

static void *thread_block;

__attribute__((noinline)) static void *chain_thread(void *arg) {
    (void)arg;
    WL_CHECK(cudaSetDevice(0));
    thread_block = chain_leaf(SIZE_THREAD);
    KEEP_FRAME();
    return NULL;
}

static void free_block(void *p, size_t n) { WL_CHECK(WL_FREE("cudaFree", 0, n, cudaFree(p))); }

int main(void) {
    truth_init("callchain");
    WL_CHECK(cudaSetDevice(0));
    /* One call site in main, so both SIZE_A blocks have one stack id; SIZE_B in between,
     * through chain_mid_b, whose frame has the same size and place as chain_mid_a's: a
     * stack taken from the one before must see the changed caller. */
    void *blocks[3];
    for (volatile int i = 0; i < 3; i++) blocks[i] = chain_root(i == 1 ? SIZE_B : SIZE_A, i == 1);
    void *a[2] = {blocks[0], blocks[2]};
    void *b = blocks[1];
    void *deep = chain_recurse(SIZE_DEEP, DEEP - 1);
    pthread_t t;
    if (pthread_create(&t, NULL, chain_thread, NULL) || pthread_join(t, NULL)) return 2;
    free_block(a[0], SIZE_A);
    free_block(a[1], SIZE_A);
    free_block(b, SIZE_B);
    free_block(deep, SIZE_DEEP);
    free_block(thread_block, SIZE_THREAD);

    printf("VRAMTRACE_CHAINS [");
    printf("{\"size\":%llu,\"functions\":[\"chain_leaf\",\"chain_mid_a\",\"chain_root\",\"main\"]},", SIZE_A);
    printf("{\"size\":%llu,\"functions\":[\"chain_leaf\",\"chain_mid_b\",\"chain_root\",\"main\"]},", SIZE_B);
    printf("{\"size\":%llu,\"functions\":[\"chain_leaf\"", SIZE_DEEP);
    for (int i = 0; i < DEEP; i++) printf(",\"chain_recurse\"");
    printf(",\"main\"]},");
    printf("{\"size\":%llu,\"functions\":[\"chain_leaf\",\"chain_thread\"]}", SIZE_THREAD);
    printf("]\n");
    fflush(stdout);
    return 0;
}
