/* Workload fd_reuse: takes its descriptors back from whatever opened them. Allocates,
 * waits 100 ms (a traced run with VRAMTRACE_FLUSH_MS=1 has written by then), then, by
 * argv[1]:
 *   close_range - closes every descriptor from 3 up and opens its log argv[2] (which gets
 *                 the lowest number, 3)
 *   dup2        - opens its log argv[2] and dup2s it onto every other open descriptor
 *                 from 3 to 4095
 *   churn       - for argv[3] milliseconds, over and over: waits 20 us with 3 free (when
 *                 vramtrace's own threads may open something of theirs there), closes
 *                 every descriptor from 3 up, opens its log argv[2] (O_APPEND; it gets 3),
 *                 writes a line, waits 50 us, writes another, closes the log. Exits 2 at
 *                 the first write that fails: its log was closed behind its back. Records
 *                 nothing meanwhile (docs/host.md: the trace's own reopening has a
 *                 window of its own), five pairs after.
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
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void allocate_and_free(int n) {
    for (int i = 0; i < n; i++) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, MiB, cudaMalloc(&p, MiB)));
        WL_CHECK(WL_FREE("cudaFree", 0, MiB, cudaFree(p)));
    }
}

/* Whether the file at `dir`/`name` holds an event line. The writer creates the file
 * before it has written an event (naming the first stack's frames can take over 200 ms
 * on a loaded machine), and the test wants events written before the descriptors are
 * taken back. */
static int has_an_event(const char *dir, const char *name) {
    static char buf[1 << 18];
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return n > 0 && memmem(buf, (size_t)n, "\"api\":", 6) != NULL;
}

/* The trace files in `dir` (up to 16), once one of them holds an event. */
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
    for (int i = 0; i < n; i++)
        if (has_an_event(dir, names[i])) return n;
    return 0;
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

static int write_line(int log, int i) {
    char line[32];
    int n = snprintf(line, sizeof line, "LOG %d\n", i);
    return write(log, line, (size_t)n) == n ? 0 : -1;
}

static long elapsed_us(const struct timespec *since) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000000 + (now.tv_nsec - since->tv_nsec) / 1000;
}

/* Busy: a sleep's timer slack (50 us) is as long as the windows timed here. */
static void spin_us(long us) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (elapsed_us(&start) < us) {
    }
}

/* The churn mode: see the top of the file. Prints the number of lines written. */
static int churn(const char *path, long ms) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int lines = 0;
    while (elapsed_us(&start) < ms * 1000) {
        /* 3 is free here: what another thread opens now gets it. */
        spin_us(20);
        if (syscall(SYS_close_range, 3u, ~0u, 0u)) return fail("close_range");
        int log = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (log < 0) return fail(path);
        if (write_line(log, lines++)) return fail("write");
        spin_us(50);
        if (write_line(log, lines++)) return fail("write");
        if (close(log)) return fail("close");
    }
    /* Recorded after the churn: the writer opens the trace again (its descriptor was
     * closed too) while nothing closes descriptors under it. */
    allocate_and_free(5);
    printf("LINES %d\n", lines);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: fd_reuse close_range|dup2|churn LOG\n");
        return 2;
    }
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    allocate_and_free(5);
    usleep(100 * 1000);
    if (strcmp(argv[1], "churn") == 0) return churn(argv[2], argc > 3 ? atol(argv[3]) : 2000);
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
