/* Workload vfork_exec: allocates, then starts children as Python's subprocess does: vfork,
 * close every descriptor above 2 in the child, exec (once a program that exists, once
 * one that does not, then _exit(127)), and allocates again after each. The child shares
 * the parent's memory until it execs or exits: what vramtrace does at its exec and _exit
 * must leave the parent's trace alone. */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <sys/wait.h>
#include <unistd.h>

static void child(const char *path) {
    pid_t pid = vfork();
    if (pid == 0) {
        for (int fd = 3; fd < 1024; fd++) close(fd);
        char *argv[] = {(char *)path, NULL};
        execv(path, argv);
        _exit(127);
    }
    if (pid < 0) exit(2);
    int status;
    if (waitpid(pid, &status, 0) != pid) exit(2);
}

static void pair(size_t size) {
    void *p;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, size, cudaMalloc(&p, size)));
    WL_CHECK(WL_FREE("cudaFree", 0, size, cudaFree(p)));
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    pair(1 << 20);
    child("/bin/true");
    pair(2 << 20);
    child("/nonexistent/vramtrace-test");
    pair(3 << 20);
    return 0;
}
