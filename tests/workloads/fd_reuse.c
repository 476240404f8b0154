/* Workload fd_reuse: takes its descriptors back from whatever opened them. Allocates,
 * waits 100 ms (a traced run with VRAMTRACE_FLUSH_MS=1 has written by then), then, by
 * argv[1]:
 *   close_range - closes every descriptor from 3 up and opens its log argv[2] (which gets
 *                 the lowest number, 3)
 *   dup2        - opens its log argv[2] and dup2s it onto every other open descriptor
 *                 from 3 to 4095
 * and writes "LOG <i>" lines to it between further allocations. The log must hold only
 * those lines. */
#define _GNU_SOURCE
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void allocate_and_free(int n) {
    for (int i = 0; i < n; i++) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, MiB, cudaMalloc(&p, MiB)));
        WL_CHECK(WL_FREE("cudaFree", 0, MiB, cudaFree(p)));
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fd_reuse close_range|dup2 LOG\n");
        return 2;
    }
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    allocate_and_free(5);
    usleep(100 * 1000);
    int log;
    if (strcmp(argv[1], "close_range") == 0) {
        if (syscall(SYS_close_range, 3u, ~0u, 0u)) return 2;
        log = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    } else {
        log = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        for (int fd = 3; fd < 4096; fd++)
            if (fd != log && fcntl(fd, F_GETFD) >= 0 && dup2(log, fd) != fd) return 2;
    }
    if (log < 0) return 2;
    for (int i = 0; i < 20; i++) {
        allocate_and_free(5);
        usleep(5 * 1000);
        char line[32];
        int n = snprintf(line, sizeof line, "LOG %d\n", i);
        if (write(log, line, (size_t)n) != n) return 2;
    }
    return 0;
}
