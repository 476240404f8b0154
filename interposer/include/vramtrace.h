/* vramtrace allocator annotations: tell vramtrace which blocks a caching allocator hands
 * out inside the device memory it reserved (the "allocated" layer), and mark phases.
 *
 * No link dependency: the functions are looked up with dlsym once, so a program built
 * with this header runs unchanged without vramtrace (every call is then a no-op).
 *
 *     #include "vramtrace.h"
 *
 *     void *pool_alloc(struct pool *p, size_t requested, cudaStream_t s) {
 *         struct block *b = pool_find_or_grow(p, requested);       // rounds up, may cudaMalloc
 *         vramtrace_block_alloc_hint(b->ptr, b->size, requested, p->device, s);
 *         return b->ptr;
 *     }
 *     void pool_free(struct pool *p, void *ptr, cudaStream_t s) {
 *         vramtrace_block_free_hint(ptr, p->device, s);
 *         pool_cache(p, ptr);                                      // kept reserved for reuse
 *     }
 *     vramtrace_marker_hint("optimizer step");
 *     vramtrace_category_begin_hint("optimizer_state");   // blocks of this thread, until _end
 *     adam_init_moments(p);
 *     vramtrace_category_end_hint("optimizer_state");
 */
#ifndef VRAMTRACE_H
#define VRAMTRACE_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The functions libvramtrace.so exports. */
typedef void (*vramtrace_block_alloc_fn)(uint64_t addr, uint64_t size, uint64_t requested, int device,
                                         void *stream);
typedef void (*vramtrace_block_free_fn)(uint64_t addr, int device, void *stream);
typedef void (*vramtrace_marker_fn)(const char *name);
typedef long (*vramtrace_flush_fn)(char *path, unsigned long len);

static inline void *vramtrace_lookup_(const char *name) { return dlsym(RTLD_DEFAULT, name); }

/* A block of `size` bytes at `addr` (inside memory reserved from the driver) was handed
 * out for a request of `requested` bytes, on `device`, for `stream` (may be NULL). */
static inline void vramtrace_block_alloc_hint(const void *addr, uint64_t size, uint64_t requested, int device,
                                              void *stream) {
    static vramtrace_block_alloc_fn f;
    static int looked;
    if (!looked) {
        f = (vramtrace_block_alloc_fn)vramtrace_lookup_("vramtrace_block_alloc");
        looked = 1;
    }
    if (f) f((uint64_t)(uintptr_t)addr, size, requested, device, stream);
}

/* The block at `addr` came back to the allocator (it stays reserved, cached). */
static inline void vramtrace_block_free_hint(const void *addr, int device, void *stream) {
    static vramtrace_block_free_fn f;
    static int looked;
    if (!looked) {
        f = (vramtrace_block_free_fn)vramtrace_lookup_("vramtrace_block_free");
        looked = 1;
    }
    if (f) f((uint64_t)(uintptr_t)addr, device, stream);
}

/* A named point or phase ("forward", "optimizer step"), shown on the timeline. */
static inline void vramtrace_marker_hint(const char *name) {
    static vramtrace_marker_fn f;
    static int looked;
    if (!looked) {
        f = (vramtrace_marker_fn)vramtrace_lookup_("vramtrace_marker");
        looked = 1;
    }
    if (f) f(name);
}

/* Blocks this thread hands out from here to the matching _end are of `category`:
 * "parameters", "gradients", "optimizer_state", "activations" or "other" (the views'
 * categories; any other name is a plain marker). Ranges nest; each thread has its own.
 * They are the markers "category:NAME" and "/category:NAME". */
static inline void vramtrace_category_begin_hint(const char *category) {
    char name[64];
    snprintf(name, sizeof name, "category:%s", category);
    vramtrace_marker_hint(name);
}

static inline void vramtrace_category_end_hint(const char *category) {
    char name[64];
    snprintf(name, sizeof name, "/category:%s", category);
    vramtrace_marker_hint(name);
}

/* Writes everything recorded so far and copies the trace's path (NUL-terminated) into
 * `path` (`len` bytes): returns the path's length (>= len: it did not fit, nothing was
 * copied), 0 where there is no trace yet (or no vramtrace), -1 where it could not be written. */
static inline long vramtrace_flush_hint(char *path, unsigned long len) {
    static vramtrace_flush_fn f;
    static int looked;
    if (!looked) {
        f = (vramtrace_flush_fn)vramtrace_lookup_("vramtrace_flush");
        looked = 1;
    }
    return f ? f(path, len) : 0;
}

#ifdef __cplusplus
}
#endif
#endif
