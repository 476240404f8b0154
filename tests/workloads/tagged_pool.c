/* A C program with its own allocator that names what its blocks are for, with the
 * category ranges of interposer/include/vramtrace.h: a model's parameters, its
 * activations (with a nested range of other tensors), gradients and the optimizer's two
 * moments, one block named nothing, and one block a second thread allocates while the
 * main thread's parameters range is open (ranges are per thread: not a parameter).
 *
 * Everything is live at once at the end of the step (the peak of the allocated layer);
 * prints its truth, and one line
 *   VRAMTRACE_CATEGORIES {"parameters":B,"gradients":B,"optimizer_state":B,
 *                         "activations":B,"other":B,"unknown":B}
 * with the requested bytes of each category at that peak.
 *
 * `tagged_pool device`: the same ranges around cudaMalloc calls of the same sizes, with
 * no pool and no annotations (a program that allocates from the driver itself); the line
 * then gives the device memory of each category at the reserved layer's peak.
 *
 * `tagged_pool whole`: the pool grows by segments of SEGMENT bytes as blocks need them
 * (each new one is the reserved layer's peak), beside libraries that take memory from the
 * driver themselves (libnccl.so.2, libcublas.so.12, libvt_plugin.so: library_buffer.c),
 * with NVML loaded.
 * At each new segment it prints
 *   VRAMTRACE_AT_RESERVED_PEAK {...the six categories..., "allocator_cache":B,
 *                               "nccl":B, "cublas":B, "other_libraries":B}
 * (the cache: its segments' bytes not requested by a live block), then holds still until
 * NVML was asked twice more; at the end an allocation of 1 TiB fails. It begins with a
 * misspelt range, `category:Parameters`, around nothing.
 *
 * `tagged_pool library_pool`: tensors in memory a library allocated, as a PyTorch pool on
 * ncclMemAlloc: 30 MiB of activations in NCCL's 32 MiB, 40 MiB of parameters in its own
 * 64 MiB segment, then 1 MiB more from the driver (the reserved layer's peak); prints
 *   VRAMTRACE_LIBRARY_POOL {"activations":B,"parameters":B,"reserved":B,"own":B}
 * (`own`: what it reserved itself). */
#include "cuda_runtime_sim.h"
#include "vramtrace.h"
#include "wl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define POOL (64 * MiB)
#define SEGMENT (32 * MiB)
#define NCCL_BYTES (6 * MiB)
#define CUBLAS_BYTES (3 * MiB)
#define PLUGIN_BYTES (2 * MiB)

int vt_nccl_buffers(size_t n);
int vt_cublas_workspace(size_t n);
int vt_plugin_buffers(size_t n);
void *vt_nccl_buffers_at(void);

enum { PARAMETERS, GRADIENTS, OPTIMIZER_STATE, ACTIVATIONS, OTHER, UNKNOWN, CATEGORIES };

static uintptr_t pool;
static size_t used;
static int from_the_driver;
static uintptr_t live[32];
static size_t live_size[32];
static int nlive;
/* Requested bytes live, by what this program meant each block for. */
static unsigned long long held[CATEGORIES];
/* `whole`: the pool's segments so far, and NVML's count of memory queries. */
static int whole;
static unsigned long long segments;
static unsigned long (*nvml_queries)(void);

static void print_categories(const char *line) {
    printf("%s {\"parameters\":%llu,\"gradients\":%llu,\"optimizer_state\":%llu,"
           "\"activations\":%llu,\"other\":%llu,\"unknown\":%llu",
           line, held[PARAMETERS], held[GRADIENTS], held[OPTIMIZER_STATE], held[ACTIVATIONS],
           held[OTHER], held[UNKNOWN]);
}

/* `whole`: a new segment for a block of `n` bytes that does not fit; the reserved layer's
 * new peak, said and held while NVML samples it. */
static void grow(size_t n) {
    if (segments && used + n <= SEGMENT) return;
    void *p;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, SEGMENT, cudaMalloc(&p, SEGMENT)));
    pool = (uintptr_t)p;
    used = 0;
    segments++;
    unsigned long long requested = 0;
    for (int c = 0; c < CATEGORIES; c++) requested += held[c];
    print_categories("VRAMTRACE_AT_RESERVED_PEAK");
    printf(",\"allocator_cache\":%llu,\"nccl\":%llu,\"cublas\":%llu,\"other_libraries\":%llu}\n",
           segments * SEGMENT - requested, (unsigned long long)NCCL_BYTES,
           (unsigned long long)CUBLAS_BYTES, (unsigned long long)PLUGIN_BYTES);
    fflush(stdout);
    unsigned long asked = nvml_queries();
    for (int waited = 0; waited < 30000 && nvml_queries() < asked + 2; waited += 5) usleep(5000);
}

/* A block of `n` bytes, meant as `category` (the range the calling thread has open). */
static void block(size_t n, int category) {
    uintptr_t at;
    if (from_the_driver) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&p, n)));
        at = (uintptr_t)p;
    } else {
        if (whole) grow(n);
        at = pool + used;
        used += n;
        vramtrace_block_alloc_hint((void *)at, n, n, 0, NULL);
        truth_call("vramtrace_block_alloc", "block_alloc", 1, n);
    }
    live_size[nlive] = n;
    live[nlive++] = at;
    held[category] += n;
}

static void *second_thread(void *arg) {
    (void)arg;
    block(1 * MiB, UNKNOWN); /* this thread opened no range */
    return NULL;
}

/* `library_pool`, above. */
static int library_pool(void) {
    WL_CHECK(vt_nccl_buffers(NCCL_BYTES * 16 / 3));
    void *nccl = vt_nccl_buffers_at();
    size_t activations = 30 * MiB, parameters = 40 * MiB;
    vramtrace_category_begin_hint("activations");
    vramtrace_block_alloc_hint(nccl, activations, activations, 0, NULL);
    truth_call("vramtrace_block_alloc", "block_alloc", 1, activations);
    vramtrace_category_end_hint("activations");
    void *segment, *more;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, POOL, cudaMalloc(&segment, POOL)));
    vramtrace_category_begin_hint("parameters");
    vramtrace_block_alloc_hint(segment, parameters, parameters, 0, NULL);
    truth_call("vramtrace_block_alloc", "block_alloc", 1, parameters);
    vramtrace_category_end_hint("parameters");
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, MiB, cudaMalloc(&more, MiB)));
    printf("VRAMTRACE_LIBRARY_POOL {\"activations\":%llu,\"parameters\":%llu,\"reserved\":%llu,"
           "\"own\":%llu}\n",
           (unsigned long long)activations, (unsigned long long)parameters,
           (unsigned long long)(NCCL_BYTES * 16 / 3 + POOL + MiB), (unsigned long long)(POOL + MiB));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    truth_init("tagged-pool");
    from_the_driver = argc > 1 && strcmp(argv[1], "device") == 0;
    whole = argc > 1 && strcmp(argv[1], "whole") == 0;
    WL_CHECK(cudaSetDevice(0));
    if (argc > 1 && strcmp(argv[1], "library_pool") == 0) return library_pool();
    void *p = NULL;
    if (whole) {
        /* A misspelt range: a plain marker, which vramtrace says so of. */
        vramtrace_category_begin_hint("Parameters");
        vramtrace_category_end_hint("Parameters");
        void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (!nvml) return 3;
        nvml_queries = (unsigned long (*)(void))dlsym(nvml, "vramtrace_sim_nvml_memory_queries");
        if (!nvml_queries) return 3;
        WL_CHECK(vt_nccl_buffers(NCCL_BYTES));
        WL_CHECK(vt_cublas_workspace(CUBLAS_BYTES));
        WL_CHECK(vt_plugin_buffers(PLUGIN_BYTES));
    } else if (!from_the_driver) {
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, POOL, cudaMalloc(&p, POOL)));
        pool = (uintptr_t)p;
    }

    vramtrace_category_begin_hint("parameters");
    block(8 * MiB, PARAMETERS);
    pthread_t t;
    pthread_create(&t, NULL, second_thread, NULL);
    pthread_join(t, NULL);
    block(4 * MiB, PARAMETERS);
    vramtrace_category_end_hint("parameters");

    vramtrace_category_begin_hint("activations");
    block(5 * MiB, ACTIVATIONS);
    vramtrace_category_begin_hint("other");
    block(512 * 1024, OTHER);
    vramtrace_category_end_hint("other");
    block(1 * MiB, ACTIVATIONS);
    vramtrace_category_end_hint("activations");

    vramtrace_category_begin_hint("gradients");
    block(12 * MiB, GRADIENTS);
    vramtrace_category_end_hint("gradients");

    vramtrace_category_begin_hint("optimizer_state");
    block(12 * MiB, OPTIMIZER_STATE);
    block(12 * MiB, OPTIMIZER_STATE);
    vramtrace_category_end_hint("optimizer_state");

    /* What is held now: on a card too small for the last block, its failure's state. */
    print_categories("VRAMTRACE_CATEGORIES_BEFORE_LAST");
    printf("}\n");
    fflush(stdout);
    block(2 * MiB, UNKNOWN); /* named nothing */

    print_categories("VRAMTRACE_CATEGORIES");
    printf("}\n");
    fflush(stdout);
    if (whole) {
        /* What a failure then finds: everything above, the cache, the libraries. */
        void *q;
        size_t too_much = 1024 * 1024 * MiB;
        if (WL_ALLOC("cudaMalloc", 0, too_much, cudaMalloc(&q, too_much)) == 0) return 4;
        return 0;
    }
    for (int i = 0; i < nlive; i++) {
        if (from_the_driver) {
            WL_CHECK(WL_FREE("cudaFree", 0, live_size[i], cudaFree((void *)live[i])));
        } else {
            vramtrace_block_free_hint((void *)live[i], 0, NULL);
            truth_call("vramtrace_block_free", "block_free", 1, 0);
        }
    }
    if (!from_the_driver) WL_CHECK(WL_FREE("cudaFree", 0, POOL, cudaFree(p)));
    return 0;
}
