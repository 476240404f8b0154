/* libvt_sharing_layer.so: a stand-in for GPU-sharing layers such as HAMi-core's
 * libvgpu.so, preloaded beside vramtrace to check that neither bypasses the other.
 *
 * Like HAMi-core it overrides dlsym (finding glibc's with dlvsym(RTLD_NEXT, "dlsym", ...),
 * then answering every lookup of a function it hooks with its own) and cuGetProcAddress /
 * cuGetProcAddress_v2 (calling the real lookup, then handing out its own function in place
 * of each memory function it hooks). It counts every allocation and free it sees, refuses
 * allocations past SHARING_LAYER_LIMIT bytes of live memory with
 * CUDA_ERROR_OUT_OF_MEMORY, and prints its counts at exit:
 *
 *   SHARING_LAYER {"pid":123,"cuMemAlloc_v2":3,...,"refused":1}
 *
 * Its "real" functions are whatever its own lookups return: glibc's dlsym on libcuda.so.1
 * and the real cuGetProcAddress. */
#define _GNU_SOURCE
#define CUDA_SIM_NO_PROTOTYPES
#include "cuda_sim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAYER_API __attribute__((visibility("default")))

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym;
static void *libcuda;
static size_t limit = SIZE_MAX;

/* The memory functions hooked, with the version their ABI appeared in (cuda.h). */
#define HOOKED(X)                                  \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)          \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0) \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0) \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)  \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0) \
    X(cuMemFree_v2, cuMemFree, 3020, 1)            \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 1)

enum {
#define ID(name, base, version, is_free) ID_##name,
    HOOKED(ID)
#undef ID
    N_HOOKED
};

static const char *const names[N_HOOKED] = {
#define NAME(name, base, version, is_free) #name,
    HOOKED(NAME)
#undef NAME
};

static void *next[N_HOOKED]; /* the function each hook calls */
static CUresult (*next_gpa)(const char *, void **, int, cuuint64_t);
static CUresult (*next_gpa_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static unsigned long long seen[N_HOOKED], refused;

/* Live allocations by address, to give back their bytes on free. */
#define LIVE_SLOTS 4096
static struct { CUdeviceptr ptr; size_t size; } live[LIVE_SLOTS];
static size_t live_bytes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    static const char *const versions[] = {"GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.17", NULL};
    for (int i = 0; versions[i] && !real_dlsym; i++) real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    const char *l = getenv("SHARING_LAYER_LIMIT");
    if (l && *l) limit = strtoull(l, NULL, 10);
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!real_dlsym || !libcuda) return;
    for (int i = 0; i < N_HOOKED; i++) next[i] = real_dlsym(libcuda, names[i]);
    *(void **)&next_gpa = real_dlsym(libcuda, "cuGetProcAddress");
    *(void **)&next_gpa_v2 = real_dlsym(libcuda, "cuGetProcAddress_v2");
}

/* Admits `size` more bytes under the limit, or refuses them. */
static int admit(int id, size_t size) {
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    seen[id]++;
    int ok = size <= limit && live_bytes <= limit - size;
    if (ok) live_bytes += size;
    else refused++;
    pthread_mutex_unlock(&lock);
    return ok;
}

static void settle(CUresult r, CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&lock);
    if (r) {
        live_bytes -= size;
    } else {
        for (int i = 0; i < LIVE_SLOTS; i++)
            if (!live[i].ptr) {
                live[i].ptr = ptr;
                live[i].size = size;
                break;
            }
    }
    pthread_mutex_unlock(&lock);
}

static void release(int id, CUdeviceptr ptr) {
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    seen[id]++;
    for (int i = 0; i < LIVE_SLOTS; i++)
        if (ptr && live[i].ptr == ptr) {
            live_bytes -= live[i].size;
            live[i].ptr = 0;
            break;
        }
    pthread_mutex_unlock(&lock);
}

/* An allocation hook: admit `size`, call the next function, settle the count. */
#define ALLOC_HOOK(name, size, params, args)                              \
    LAYER_API CUresult name params {                                      \
        if (!admit(ID_##name, size)) return CUDA_ERROR_OUT_OF_MEMORY;     \
        CUresult r = ((CUresult(*) params)next[ID_##name]) args;          \
        settle(r, r ? 0 : *p, size);                                      \
        return r;                                                         \
    }

ALLOC_HOOK(cuMemAlloc_v2, size, (CUdeviceptr * p, size_t size), (p, size))
ALLOC_HOOK(cuMemAllocManaged, size, (CUdeviceptr * p, size_t size, unsigned flags), (p, size, flags))
ALLOC_HOOK(cuMemAllocPitch_v2, width *height,
           (CUdeviceptr * p, size_t *pitch, size_t width, size_t height, unsigned elem),
           (p, pitch, width, height, elem))
ALLOC_HOOK(cuMemAllocAsync, size, (CUdeviceptr * p, size_t size, CUstream s), (p, size, s))
ALLOC_HOOK(cuMemAllocFromPoolAsync, size, (CUdeviceptr * p, size_t size, CUmemoryPool pool, CUstream s),
           (p, size, pool, s))

LAYER_API CUresult cuMemFree_v2(CUdeviceptr p) {
    release(ID_cuMemFree_v2, p);
    return ((CUresult(*)(CUdeviceptr))next[ID_cuMemFree_v2])(p);
}

LAYER_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    release(ID_cuMemFreeAsync, p);
    return ((CUresult(*)(CUdeviceptr, CUstream))next[ID_cuMemFreeAsync])(p, s);
}

/* The layer's own function for `name`, or NULL. */
static void *hook_of(const char *name) {
#define HOOK(n, base, version, is_free) \
    if (!strcmp(name, #n)) return (void *)&n;
    HOOKED(HOOK)
#undef HOOK
    return NULL;
}

LAYER_API CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
LAYER_API CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* After a real lookup of `symbol` at `version` found `*pfn`: the layer's own function in
 * its place, when it hooks that variant. The per-thread-stream variants are not hooked. */
static void substitute(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    if (!*pfn) return;
    if (!strcmp(symbol, "cuGetProcAddress")) {
        if (version >= 12000) *pfn = (void *)&cuGetProcAddress_v2;
        else if (version >= 11030) *pfn = (void *)&cuGetProcAddress;
        return;
    }
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) return;
#define SUBST(n, base, v, is_free)                        \
    if (!strcmp(symbol, #base) && version >= (v)) {       \
        *pfn = (void *)&n;                                \
        return;                                           \
    }
    HOOKED(SUBST)
#undef SUBST
}

LAYER_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    pthread_once(&once, init);
    if (!next_gpa) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = next_gpa(symbol, pfn, version, flags);
    if (!r && symbol && pfn) substitute(symbol, pfn, version, flags);
    return r;
}

LAYER_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status) {
    pthread_once(&once, init);
    if (!next_gpa_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = next_gpa_v2(symbol, pfn, version, flags, status);
    if (!r && symbol && pfn) substitute(symbol, pfn, version, flags);
    return r;
}

/* As HAMi-core: RTLD_NEXT goes straight to glibc, the hooked names get the layer's own
 * functions, everything else is glibc's answer. */
LAYER_API void *dlsym(void *handle, const char *symbol) {
    pthread_once(&once, init);
    if (!real_dlsym) return NULL;
    if (handle != RTLD_NEXT) {
        if (!strcmp(symbol, "cuGetProcAddress")) return (void *)&cuGetProcAddress;
        if (!strcmp(symbol, "cuGetProcAddress_v2")) return (void *)&cuGetProcAddress_v2;
        void *own = hook_of(symbol);
        if (own) return own;
    }
    return real_dlsym(handle, symbol);
}

__attribute__((destructor)) static void report(void) {
    printf("SHARING_LAYER {\"pid\":%d,", (int)getpid());
    for (int i = 0; i < N_HOOKED; i++) printf("\"%s\":%llu,", names[i], seen[i]);
    printf("\"refused\":%llu}\n", refused);
    fflush(stdout);
}
