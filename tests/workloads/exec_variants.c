/* Workload exec_variants: allocates 1 and 2 MiB (the first freed), prints its truth,
 * then leaves its image by the entry point argv[1] names:
 *   execl execlp execle fexecve execveat  - run runtime_dynamic (which prints its own
 *                                           truth); exits 127 if the exec fails
 *   exit _exit _Exit quick_exit           - status 0
 * Each of these reaches the kernel by its own path inside glibc. */
#define _GNU_SOURCE
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static void on_quick_exit(void) { fflush(stdout); }

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "exit";
    truth_init(WORKLOAD_NAME);
    at_quick_exit(on_quick_exit);
    WL_CHECK(cudaSetDevice(0));
    void *a, *b;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, MiB, cudaMalloc(&a, MiB)));
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, 2 * MiB, cudaMalloc(&b, 2 * MiB)));
    WL_CHECK(WL_FREE("cudaFree", 0, MiB, cudaFree(a)));
    truth_print();
    fflush(stdout);

    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) return 2;
    path[n] = 0;
    char *slash = strrchr(path, '/');
    strcpy(slash + 1, "runtime_dynamic");
    char *args[] = {path, NULL};
    if (strcmp(how, "execl") == 0) execl(path, path, (char *)NULL);
    else if (strcmp(how, "execlp") == 0) execlp(path, path, (char *)NULL);
    else if (strcmp(how, "execle") == 0) execle(path, path, (char *)NULL, environ);
    else if (strcmp(how, "fexecve") == 0) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) fexecve(fd, args, environ);
    } else if (strcmp(how, "execveat") == 0) execveat(AT_FDCWD, path, args, environ, 0);
    else if (strcmp(how, "exit") == 0) exit(0);
    else if (strcmp(how, "_exit") == 0) _exit(0);
    else if (strcmp(how, "_Exit") == 0) _Exit(0);
    else if (strcmp(how, "quick_exit") == 0) quick_exit(0);
    else return 2;
    return 127;
}
