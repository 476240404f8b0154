/* Workload fork_exec: one process tree, three truths.
 * parent (fork-parent): cudaMalloc 2 blocks, fork a child (fork-child: 3 cudaMalloc,
 * 2 cudaFree, its own truth, _exit), then fork a child that execs runtime_dynamic (which
 * prints its own truth), then free its blocks. Real CUDA forbids a forked child to use
 * the parent's context; the simulation allows it, which keeps the child simple. */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <limits.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int wait_ok(pid_t pid) {
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void forked_child(void) {
    truth_reset("fork-child");
    static const size_t sizes[3] = {1 * MiB, 2 * MiB, 3 * MiB};
    void *p[3];
    for (int i = 0; i < 3; i++) WL_CHECK(WL_ALLOC("cudaMalloc", 0, sizes[i], cudaMalloc(&p[i], sizes[i])));
    WL_CHECK(WL_FREE("cudaFree", 0, sizes[0], cudaFree(p[0])));
    WL_CHECK(WL_FREE("cudaFree", 0, sizes[2], cudaFree(p[2])));
    truth_print(); /* leaves the 2 MiB block: it dies with the process */
    fflush(stdout);
    _exit(0);
}

static void exec_child(void) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 32);
    if (n <= 0) _exit(127);
    self[n] = 0;
    char *slash = strrchr(self, '/');
    strcpy(slash + 1, "runtime_dynamic");
    char *argv[] = {self, NULL};
    execv(self, argv);
    _exit(127);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    void *a, *b;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, 8 * MiB, cudaMalloc(&a, 8 * MiB)));
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, 16 * MiB, cudaMalloc(&b, 16 * MiB)));
    fflush(stdout); /* nothing buffered may be printed twice */

    pid_t pid = fork();
    if (pid == 0) forked_child();
    int ok = pid > 0 && wait_ok(pid);
    pid = fork();
    if (pid == 0) exec_child();
    ok &= pid > 0 && wait_ok(pid);

    WL_CHECK(WL_FREE("cudaFree", 0, 8 * MiB, cudaFree(a)));
    WL_CHECK(WL_FREE("cudaFree", 0, 16 * MiB, cudaFree(b)));
    if (!ok) fprintf(stderr, "fork_exec: a child failed\n");
    return ok ? 0 : 1;
}
