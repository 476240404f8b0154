/* Workload fork_threads: THREADS threads allocate and free in a loop while the main
 * thread forks FORKS children one after another; each child makes its own calls,
 * prints its own truth (fork-threads-child) and ends, by exit() or by _exit()
 * alternately. The parent stops its threads after the last child and prints its truth.
 *
 * The simulated driver's lock is not fork-safe (NVIDIA's driver forbids CUDA in a forked
 * child altogether), so the threads hold a read lock around each CUDA call and fork takes
 * it for writing (pthread_atfork): no thread is inside the driver at the instant of fork.
 * The interposer's writer thread and queues are not held back: its own fork handling is
 * what this exercises. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define FORKS 12

/* Writer-preferring: with reader preference, four threads that always hold it starve fork. */
static pthread_rwlock_t gate;
static volatile int stop;

static void gate_close(void) { pthread_rwlock_wrlock(&gate); }
static void gate_open(void) { pthread_rwlock_unlock(&gate); }

static void *worker(void *arg) {
    (void)arg;
    WL_CHECK(cudaSetDevice(0));
    for (long i = 0; !__atomic_load_n(&stop, __ATOMIC_RELAXED); i++) {
        size_t size = 4096 * (size_t)(1 + i % 16);
        void *p;
        pthread_rwlock_rdlock(&gate);
        int e = WL_ALLOC("cudaMalloc", 0, size, cudaMalloc(&p, size));
        pthread_rwlock_unlock(&gate);
        WL_CHECK(e);
        pthread_rwlock_rdlock(&gate);
        e = WL_FREE("cudaFree", 0, size, cudaFree(p));
        pthread_rwlock_unlock(&gate);
        WL_CHECK(e);
    }
    return NULL;
}

static void child(int n) {
    truth_reset("fork-threads-child");
    void *p[3];
    for (int i = 0; i < 3; i++)
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, (size_t)(i + 1) * MiB, cudaMalloc(&p[i], (size_t)(i + 1) * MiB)));
    WL_CHECK(WL_FREE("cudaFree", 0, 1 * MiB, cudaFree(p[0])));
    WL_CHECK(WL_FREE("cudaFree", 0, 3 * MiB, cudaFree(p[2])));
    if (n % 2 == 0) exit(0); /* atexit prints the truth; the interposer ends with "exit" */
    truth_print();
    _exit(0);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    void *held;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, 64 * MiB, cudaMalloc(&held, 64 * MiB)));
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&gate, &attr) || pthread_atfork(gate_close, gate_open, gate_open)) return 2;
    fflush(stdout);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, NULL)) return 2;
    int ok = 1;
    for (int n = 0; n < FORKS; n++) {
        usleep(5000);
        pid_t pid = fork();
        if (pid == 0) child(n);
        int status;
        ok &= pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    WL_CHECK(WL_FREE("cudaFree", 0, 64 * MiB, cudaFree(held)));
    if (!ok) fprintf(stderr, "fork_threads: a child failed\n");
    return ok ? 0 : 1;
}
