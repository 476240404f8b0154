/* Workload main_exit: argv[1] threads (default 4) each allocate and free argv[2] blocks
 * of 64 KiB (default 200) while main ends with pthread_exit(), the POSIX way to let them
 * finish. The process ends when the last of them returns: glibc then calls exit(0),
 * which prints the truth. */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static int blocks = 200;

static void *worker(void *arg) {
    (void)arg;
    WL_CHECK(cudaSetDevice(0));
    for (int i = 0; i < blocks; i++) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, 64 * 1024, cudaMalloc(&p, 64 * 1024)));
        WL_CHECK(WL_FREE("cudaFree", 0, 64 * 1024, cudaFree(p)));
        if (i % 50 == 0) usleep(1000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) blocks = atoi(argv[2]);
    truth_init(WORKLOAD_NAME);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL)) return 2;
    }
    pthread_exit(NULL);
}
