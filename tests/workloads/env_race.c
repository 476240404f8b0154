/* Workload env_race: argv[1] children (default 40), forked one after another. Each child
 * starts two threads that change its environment without pause - RANK set to other values
 * and removed, and variables added and removed so that the environment array is
 * reallocated - while it allocates and frees argv[2] blocks of 1 MiB (default 20), then
 * exits. Each child prints its own truth; the parent prints, after the last child:
 *
 *   ENV_RACE {"children":N,"ok":N}
 *
 * where ok counts the children that exited 0 (a crash is a child that did not). */
#define _GNU_SOURCE
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void *hammer(void *arg) {
    long id = (long)arg;
    char name[32], value[32];
    for (unsigned long i = 0;; i++) {
        snprintf(value, sizeof value, "changed-%ld-%lu", id, i);
        setenv("RANK", value, 1);
        snprintf(name, sizeof name, "ENV_RACE_%ld_%lu", id, i % 64);
        setenv(name, value, 1);
        unsetenv("RANK");
        if (i % 64 == 63)
            for (int k = 0; k < 64; k++) {
                snprintf(name, sizeof name, "ENV_RACE_%ld_%d", id, k);
                unsetenv(name);
            }
    }
    return NULL;
}

static void child(int blocks) {
    truth_reset("env-race-child");
    for (long i = 0; i < 2; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, hammer, (void *)i)) _exit(2);
    }
    WL_CHECK(cudaSetDevice(0));
    for (int i = 0; i < blocks; i++) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, MiB, cudaMalloc(&p, MiB)));
        usleep(200);
        WL_CHECK(WL_FREE("cudaFree", 0, MiB, cudaFree(p)));
    }
    exit(0); /* truth printed at exit, with the hammers still running */
}

int main(int argc, char **argv) {
    int children = argc > 1 ? atoi(argv[1]) : 40;
    int blocks = argc > 2 ? atoi(argv[2]) : 20;
    truth_init(WORKLOAD_NAME);
    /* The simulated driver reads its settings with getenv at its first cuInit: done here,
     * before any hammering, so that the only getenv left to race is vramtrace's. */
    WL_CHECK(cudaSetDevice(0));
    fflush(stdout);
    int ok = 0;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid == 0) child(blocks);
        int status;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            ok++;
    }
    printf("ENV_RACE {\"children\":%d,\"ok\":%d}\n", children, ok);
    return ok == children ? 0 : 1;
}
