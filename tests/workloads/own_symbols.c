/* Workload own_symbols: a program whose libraries look up their own symbols with
 * dlsym(RTLD_NEXT, ...) and dlsym(RTLD_DEFAULT, ...), as OpenMP's tool loader does
 * (libvt_ownsym_a and _b are linked, _c is dlopened with RTLD_LOCAL, as Python loads
 * libomp). It prints every answer; the test compares the output with and without
 * vramtrace, which must be identical. No CUDA call, so no truth line. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void ownsym_probe_a(FILE *out);
void ownsym_probe_b(FILE *out);

int main(void) {
    ownsym_probe_a(stdout);
    ownsym_probe_b(stdout);
    void *c = dlopen("libvt_ownsym_c.so", RTLD_NOW | RTLD_LOCAL);
    if (!c) {
        fprintf(stderr, "own_symbols: %s\n", dlerror());
        return 2;
    }
    void (*probe_c)(FILE *) = (void (*)(FILE *))dlsym(c, "ownsym_probe_c");
    if (!probe_c) {
        fprintf(stderr, "own_symbols: no ownsym_probe_c\n");
        return 2;
    }
    probe_c(stdout);
    int (*foo_c)(void) = (int (*)(void))dlsym(c, "vt_foo");
    printf("main dlsym(c, vt_foo)() = %d\n", foo_c ? foo_c() : -1);
    printf("main RTLD_DEFAULT vt_only_c %s\n", dlsym(RTLD_DEFAULT, "vt_only_c") ? "found" : "NULL");
    return 0;
}
