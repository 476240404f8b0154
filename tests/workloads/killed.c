/* Workload killed: allocates steadily until it is killed (or argv[1] calls are made),
 * logging every call on stdout as it goes, unbuffered, one write per line:
 *
 *   CALL <index> <api> <size or address> <CLOCK_MONOTONIC ns before the call>
 *   GOT <index> <address>                    (after a cudaMalloc returned)
 *
 * Calls alternate: cudaMalloc of 4096 * (1 + n % 32) bytes, then, every other pair, the
 * cudaFree of the block before it, so that memory grows. argv[2]: microseconds between
 * calls (default 200). A CALL line is written before its call, so the trace can never
 * hold a call the log lacks. No truth line: the process never exits by itself. */
#include "cuda_runtime_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* One line, one write(2): no stdio buffer can hold a line back when the process dies. */
static void say(const char *line, int n) {
    if (n <= 0 || write(1, line, (size_t)n) != n) _exit(3);
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 1000000000L;
    long pause_us = argc > 2 ? atol(argv[2]) : 200;
    if (cudaSetDevice(0)) return 2;
    unsigned long long index = 0;
    void *previous = NULL;
    for (long n = 0; (long)index < calls; n++) {
        size_t size = 4096 * (size_t)(1 + n % 32);
        void *p = NULL;
        char line[160];
        say(line, snprintf(line, sizeof line, "CALL %llu cudaMalloc %zu %llu\n", index, size, mono_ns()));
        if (cudaMalloc(&p, size)) return 2;
        say(line, snprintf(line, sizeof line, "GOT %llu %llu\n", index, (unsigned long long)(size_t)p));
        index++;
        if (n % 2 == 1 && previous && (long)index < calls) {
            say(line, snprintf(line, sizeof line, "CALL %llu cudaFree %llu %llu\n", index,
                               (unsigned long long)(size_t)previous, mono_ns()));
            index++;
            if (cudaFree(previous)) return 2;
        }
        previous = p;
        if (pause_us > 0) usleep((useconds_t)pause_us);
    }
    return 0;
}
