/* A process forked from inside dlclose (a library destructor forks): after the dlclose
 * returns, parent and child each allocate, so that the stack tests can check both still
 * record stacks. Each process prints its own truth (its one allocation is its peak). */
#include "wl.h"

#include "cuda_runtime_sim.h"
#include <dlfcn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void *allocate_after_unload(size_t n) {
    void *p = NULL;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&p, n)));
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void) {
    WL_CHECK(cudaSetDevice(0));
    void *h = dlopen("libvt_fork_in_unload.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 2;
    if (dlclose(h)) return 2;
    const char *who = getenv("VT_FORKED_IN_UNLOAD");
    if (!who) return 3;
    int child = strcmp(who, "child") == 0;
    truth_init(child ? "fork-in-unload-child" : "fork-in-unload-parent");
    size_t n = child ? 2 * MiB + 2 : 1 * MiB + 1;
    void *p = allocate_after_unload(n);
    WL_CHECK(WL_FREE("cudaFree", 0, n, cudaFree(p)));
    fflush(stdout);
    if (child) exit(0);
    int status = 0;
    if (waitpid((pid_t)atoi(who), &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) return 4;
    return 0;
}
