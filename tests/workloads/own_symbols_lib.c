/* A library of the own_symbols workload, built three times (OWNSYM_NAME a, b, c): each
 * defines vt_foo (returning OWNSYM_VALUE) and a probe that looks symbols up the way
 * OpenMP's tool loader does - dlsym(RTLD_NEXT, its own name), dlsym(RTLD_NEXT, "dlsym") -
 * and describes each answer by library and symbol (addresses differ from run to run). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

int vt_foo(void) { return OWNSYM_VALUE; }
/* Only in this library: found through its own scope even when it was dlopened locally. */
int CAT(vt_only_, OWNSYM_ID)(void) { return OWNSYM_VALUE * 10; }

static void describe(FILE *out, const char *how, const char *name, void *p) {
    Dl_info info;
    if (!p) {
        fprintf(out, "%s %s %s -> NULL\n", OWNSYM_NAME, how, name);
        return;
    }
    if (!dladdr(p, &info) || !info.dli_fname) {
        fprintf(out, "%s %s %s -> (unknown)\n", OWNSYM_NAME, how, name);
        return;
    }
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    fprintf(out, "%s %s %s -> %s:%s+%ld\n", OWNSYM_NAME, how, name, base,
            info.dli_sname ? info.dli_sname : "?",
            info.dli_saddr ? (long)((char *)p - (char *)info.dli_saddr) : -1L);
}

void CAT(ownsym_probe_, OWNSYM_ID)(FILE *out) {
    static const char *names[] = {"vt_foo", "dlsym", "malloc", "vt_only_a", "vt_only_b",
                                  "vt_only_c", "vt_missing", "cuMemAlloc_v2", NULL};
    for (int i = 0; names[i]; i++) {
        describe(out, "RTLD_NEXT", names[i], dlsym(RTLD_NEXT, names[i]));
        describe(out, "RTLD_DEFAULT", names[i], dlsym(RTLD_DEFAULT, names[i]));
    }
    int (*next_foo)(void) = (int (*)(void))dlsym(RTLD_NEXT, "vt_foo");
    fprintf(out, "%s next vt_foo() = %d\n", OWNSYM_NAME, next_foo ? next_foo() : -1);
}
