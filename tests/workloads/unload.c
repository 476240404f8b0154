/* Libraries loaded, used and unloaded in turn (dlopen, an allocation inside, dlclose),
 * for the stack tests: the two libraries are built from one source and land where the
 * other was, so a frame's address means another function from one load to the next.
 * Prints, besides its truth, one line per allocation:
 *   VRAMTRACE_UNLOAD {"size":N,"function":"unload_alloc_a"|"unload_alloc_b"}
 * Usage: unload [ROUNDS] */
#include "wl.h"

#include "cuda_runtime_sim.h"
#include <dlfcn.h>

#define MAX_ROUNDS 256

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    truth_init("unload");
    WL_CHECK(cudaSetDevice(0));
    void *blocks[MAX_ROUNDS];
    size_t sizes[MAX_ROUNDS];
    for (int i = 0; i < rounds; i++) {
        const char *name = i % 2 ? "b" : "a";
        char lib[64], fn[64];
        snprintf(lib, sizeof lib, "libvt_unload_%s.so", name);
        snprintf(fn, sizeof fn, "unload_alloc_%s", name);
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
            return 2;
        }
        int (*alloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(h, fn);
        if (!alloc) return 2;
        sizes[i] = (size_t)(i + 1) * MiB + 7;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, sizes[i], alloc(&blocks[i], sizes[i])));
        printf("VRAMTRACE_UNLOAD {\"size\":%zu,\"function\":\"%s\"}\n", sizes[i], fn);
        if (dlclose(h)) return 2;
    }
    for (int i = 0; i < rounds; i++) WL_CHECK(WL_FREE("cudaFree", 0, sizes[i], cudaFree(blocks[i])));
    fflush(stdout);
    return 0;
}
