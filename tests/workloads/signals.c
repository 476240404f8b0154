/* Workload signals: the main thread blocks SIGUSR1. A worker unblocks it for its first
 * CUDA calls (so vramtrace's writer starts from a thread that takes SIGUSR1), blocks it
 * again and keeps allocating; a second thread, started after it, takes SIGUSR1 and does
 * nothing else. The main thread sends the process SIGUSR1 argv[1] times (default 200),
 * each taken by a thread that does not block it. The handler logs which thread that
 * was, one write(2) per line:
 *
 *   SIGNAL <thread name>
 *
 * A program's handlers must run on its own threads, never on vramtrace's (Linux gives a
 * process-directed signal to the first willing thread in creation order, which would
 * be the writer). */
#define _GNU_SOURCE
#include "cuda_runtime_sim.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int taken;

static void on_usr1(int sig) {
    (void)sig;
    char line[64] = "SIGNAL ";
    int fd = open("/proc/thread-self/comm", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, line + 7, sizeof line - 8) : -1;
    if (fd >= 0) close(fd);
    size_t len = 7 + (n > 0 ? (size_t)n : 0);
    if (len == 7 || line[len - 1] != '\n') line[len++] = '\n';
    if (write(1, line, len) != (ssize_t)len) _exit(3);
    atomic_fetch_add(&taken, 1);
}

static atomic_int started;

static void set_usr1(int how) {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(how, &usr1, NULL);
}

static void *worker(void *arg) {
    (void)arg;
    set_usr1(SIG_UNBLOCK);
    void *p;
    if (cudaSetDevice(0) || cudaMalloc(&p, 4096) || cudaFree(p)) _exit(2);
    set_usr1(SIG_BLOCK);
    atomic_store(&started, 1);
    for (;;) {
        if (cudaMalloc(&p, 4096) || cudaFree(p)) _exit(2);
        usleep(100);
    }
    return NULL;
}

static void *taker(void *arg) {
    (void)arg;
    set_usr1(SIG_UNBLOCK);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    int signals = argc > 1 ? atoi(argv[1]) : 200;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    set_usr1(SIG_BLOCK);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL)) return 2;
    while (!atomic_load(&started)) usleep(1000); /* vramtrace's writer started in its calls */
    if (pthread_create(&t, NULL, taker, NULL)) return 2;
    for (int i = 0; i < signals; i++) {
        int before = atomic_load(&taken);
        kill(getpid(), SIGUSR1);
        for (int ms = 0; ms < 10000 && atomic_load(&taken) == before; ms++) usleep(1000);
    }
    return 0;
}
