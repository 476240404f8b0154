/* Workload exit_busy: argv[1] threads (default 4) allocate and free 4 KiB through the
 * dynamic runtime in a loop, while the main thread, once they have made argv[2] calls
 * together (default 20000), ends the process under them: exit(0), or _exit(0) when
 * argv[3] is "_exit". Each call is logged after it returned, one write(2) per line:
 *
 *   DONE <tid> <api>
 *
 * A logged call certainly returned, so the trace must hold it; a call in flight when the
 * process ended may be traced without being logged, at most one per thread. No truth
 * line: the workers are still running when the process ends. */
#define _GNU_SOURCE
#include "cuda_runtime_sim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long made;

static void say(const char *line, int n) {
    if (n <= 0 || write(1, line, (size_t)n) != n) _exit(3);
}

static void *worker(void *arg) {
    (void)arg;
    if (cudaSetDevice(0)) _exit(2);
    int tid = gettid();
    char line[64];
    for (;;) {
        void *p;
        if (cudaMalloc(&p, 4096)) _exit(2);
        say(line, snprintf(line, sizeof line, "DONE %d cudaMalloc\n", tid));
        if (cudaFree(p)) _exit(2);
        say(line, snprintf(line, sizeof line, "DONE %d cudaFree\n", tid));
        atomic_fetch_add(&made, 2);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long calls = argc > 2 ? atol(argv[2]) : 20000;
    int immediate = argc > 3 && strcmp(argv[3], "_exit") == 0;
    if (n < 1 || n > 256 || calls < 0) {
        fprintf(stderr, "usage: exit_busy [threads] [calls before the end] [exit|_exit]\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL)) return 2;
    }
    while (atomic_load(&made) < calls) usleep(1000);
    if (immediate) _exit(0);
    exit(0);
}
