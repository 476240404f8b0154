/* Workload fd_reuse: takes its descriptors back from whatever opened them. Allocates,
 * waits 100 ms (a traced run with VRAMTRACE_FLUSH_MS=1 has written by then), then, by
 * argv[1]:
 *   close_range - closes every descriptor from 3 up and opens its log argv[2] (which gets
 *                 the lowest number, 3)
 *   dup2        - opens its log argv[2] and dup2s it onto every other open descriptor
 *                 from 3 to 4095
 * and writes "LOG <i>" lines to it between further allocations. The log must hold only
 * those lines.
 *
 * With argv[3] and argv[4] (close_range only), it then also plays the attacker of a shared
 * directory: every *.jsonl file in the directory argv[3] is renamed to *.jsonl.moved and
 * its name taken by a symlink to argv[4], or by a new regular file holding "PLANTED\n"
 * when argv[4] is "-". */
#define _GNU_SOURCE
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <dirent.h>
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

/* The trace files in `dir` (up to 16). */
static int find_traces(const char *dir, char names[16][256]) {
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 16) {
        size_t len = strlen(e->d_name);
        if (len >= 6 && len < 256 && strcmp(e->d_name + len - 6, ".jsonl") == 0)
            strcpy(names[n++], e->d_name);
    }
    closedir(d);
    return n;
}

static int plant(const char *dir, char names[16][256], int n, const char *target) {
    for (int i = 0; i < n; i++) {
        char path[4096], moved[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path ||
            snprintf(moved, sizeof moved, "%s.moved", path) >= (int)sizeof moved ||
            rename(path, moved))
            return -1;
        if (strcmp(target, "-") == 0) {
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
            if (fd < 0 || write(fd, "PLANTED\n", 8) != 8) return -1;
            close(fd);
        } else if (symlink(target, path)) {
            return -1;
        }
    }
    return n > 0 ? 0 : -1;
}

static int fail(const char *what) {
    perror(what);
    return 2;
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
    /* The attacker's names are read while the directory can still be opened. */
    char names[16][256];
    int traces = 0;
    for (int i = 0; argc > 4 && i < 10000 && traces == 0; i++) {
        traces = find_traces(argv[3], names);
        if (!traces) usleep(1000);
    }
    int log;
    if (strcmp(argv[1], "close_range") == 0) {
        if (syscall(SYS_close_range, 3u, ~0u, 0u)) return fail("close_range");
        log = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (argc > 4 && plant(argv[3], names, traces, argv[4])) return fail("plant");
    } else {
        log = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        for (int fd = 3; fd < 4096; fd++)
            if (fd != log && fcntl(fd, F_GETFD) >= 0 && dup2(log, fd) != fd) return fail("dup2");
    }
    if (log < 0) return fail(argv[2]);
    for (int i = 0; i < 20; i++) {
        allocate_and_free(5);
        usleep(5 * 1000);
        char line[32];
        int n = snprintf(line, sizeof line, "LOG %d\n", i);
        if (write(log, line, (size_t)n) != n) return fail("write");
    }
    return 0;
}
