/* A library that allocates on a thread of its own, as a framework's worker pool does:
 * in a Python process, a thread that never ran Python. */
#include "cuda_runtime_sim.h"
#include <pthread.h>
#include <stddef.h>

struct request {
    size_t size;
    void *p;
    int err;
};

static void *allocate(void *arg) {
    struct request *r = arg;
    r->err = cudaSetDevice(0);
    if (!r->err) r->err = cudaMalloc(&r->p, r->size);
    return NULL;
}

/* Allocates `size` bytes on a new thread, waits for it; the pointer in *p. */
int own_thread_alloc(void **p, size_t size) {
    struct request r = {size, NULL, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, allocate, &r) || pthread_join(t, NULL)) return -1;
    *p = r.p;
    return r.err;
}
