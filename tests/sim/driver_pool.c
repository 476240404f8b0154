/* Simulated libcuda.so.1: stream-ordered allocation and memory pools.
 *
 * Model (simpler than NVIDIA's, but with the property a profiler must handle: a pool
 * reserves more than it hands out, and keeps memory after it is freed):
 * - every block a pool hands out reserves its size rounded up to 2 MiB, charged against
 *   the device at once (RESERVED_MEM_CURRENT); USED_MEM_CURRENT sums requested sizes;
 * - cuMemFreeAsync returns a block to the pool's cache; it stays reserved and charged;
 * - an allocation reuses the smallest cached block that is large enough (no splitting);
 * - cached blocks go back to the device on cuMemPoolTrimTo, on cuMemPoolDestroy, on a
 *   synchronize (stream, event or context) down to the pool's release threshold (default
 *   0, as in CUDA), and when an allocation would not fit otherwise (the pool first
 *   empties its own cache, then fails with CUDA_ERROR_OUT_OF_MEMORY);
 * - CUDA 13's host, host-NUMA and managed pools (cuMemPoolCreate with such properties,
 *   cuMemGetDefaultMemPool / cuMemGetMemPool) hand out host memory: never charged
 *   against a device (device -1), so the device's used memory shows none of it. */
#include "sim_internal.h"

#include <stdlib.h>

struct sim_pool {
    int device; /* -1: host or managed memory, charged to no device */
    int loc_type, loc_id, alloc_type;
    int is_default;
    int destroyed;
    size_t reserved, used, reserved_high, used_high, release_threshold;
    struct sim_block *cache; /* freed blocks, still charged; linked through next */
    struct sim_pool *next_pool;
};

static struct sim_pool *pools;

static size_t round_up(size_t n) { return (n + SIM_GRANULARITY - 1) & ~(size_t)(SIM_GRANULARITY - 1); }

CUAPI int sim_reuse_pools;
CUAPI void (*sim_after_pool_destroy)(void);

/* A destroyed pool that holds nothing, to be made again (sim_reuse_pools), or NULL. */
static struct sim_pool *reusable_locked(void) {
    if (!sim_reuse_pools) return NULL;
    for (struct sim_pool *q = pools; q; q = q->next_pool)
        if (q->destroyed && !q->used && !q->cache) return q;
    return NULL;
}

struct sim_pool *sim_pool_new_locked(int device, int is_default) {
    struct sim_pool *p = reusable_locked();
    if (p) {
        struct sim_pool *next = p->next_pool;
        *p = (struct sim_pool){.next_pool = next};
    } else {
        p = calloc(1, sizeof *p);
        p->next_pool = pools;
        pools = p;
    }
    p->device = device;
    p->loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->loc_id = device;
    p->alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->is_default = is_default;
    return p;
}

static int pool_valid_locked(struct sim_pool *p) {
    for (struct sim_pool *q = pools; q; q = q->next_pool)
        if (q == p) return !p->destroyed;
    return 0;
}

static int charge(struct sim_pool *p, size_t bytes) { return p->device < 0 ? 0 : sim_charge(p->device, bytes); }
static void uncharge(struct sim_pool *p, size_t bytes) {
    if (p->device >= 0) sim_uncharge(p->device, bytes);
}

static void release_block_locked(struct sim_pool *p, struct sim_block *b) {
    uncharge(p, b->charged);
    p->reserved -= b->charged;
    sim_mem_put((void *)(uintptr_t)b->key, b->charged);
    free(b);
}

static void trim_locked(struct sim_pool *p, size_t keep) {
    while (p->reserved > keep && p->cache) {
        struct sim_block *b = p->cache;
        p->cache = b->next;
        release_block_locked(p, b);
    }
}

void sim_pool_free_block_locked(struct sim_block *b) {
    struct sim_pool *p = b->extra;
    p->used -= b->size;
    if (p->destroyed) {
        release_block_locked(p, b);
        return;
    }
    b->next = p->cache;
    p->cache = b;
}

void sim_pools_sync(int device) {
    pthread_mutex_lock(&sim_lock);
    for (struct sim_pool *p = pools; p; p = p->next_pool)
        if (p->device == device && !p->destroyed) trim_locked(p, p->release_threshold);
    pthread_mutex_unlock(&sim_lock);
}

static struct sim_block *take_cached_locked(struct sim_pool *p, size_t need) {
    struct sim_block **best = NULL;
    for (struct sim_block **pp = &p->cache; *pp; pp = &(*pp)->next)
        if ((*pp)->charged >= need && (!best || (*pp)->charged < (*best)->charged)) best = pp;
    if (!best) return NULL;
    struct sim_block *b = *best;
    *best = b->next;
    return b;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t size, struct sim_pool *p) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t need = round_up(size);
    pthread_mutex_lock(&sim_lock);
    if (!p) p = sim_devices[dev].current_pool;
    if (!pool_valid_locked(p)) {
        pthread_mutex_unlock(&sim_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct sim_block *b = take_cached_locked(p, need);
    if (!b) {
        if (charge(p, need)) {
            trim_locked(p, 0);
            if (charge(p, need)) {
                pthread_mutex_unlock(&sim_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        void *mem = sim_mem_get(need);
        if (!mem) {
            uncharge(p, need);
            pthread_mutex_unlock(&sim_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        b = malloc(sizeof *b);
        *b = (struct sim_block){.key = (uintptr_t)mem, .charged = need, .device = p->device,
                                .space = SP_DEV, .kind = K_POOL, .extra = p};
        p->reserved += need;
        if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    }
    b->size = size;
    p->used += size;
    if (p->used > p->used_high) p->used_high = p->used;
    sim_table_insert(b);
    pthread_mutex_unlock(&sim_lock);
    *dptr = (CUdeviceptr)b->key;
    return CUDA_SUCCESS;
}

/* The stream is not looked at: there is no queue, so every operation is complete. */
CUAPI CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) {
    SIM_UNUSED(s);
    return pool_alloc(dptr, size, NULL);
}
CUAPI CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) {
    SIM_UNUSED(s);
    return pool_alloc(dptr, size, NULL);
}
CUAPI CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    SIM_UNUSED(s);
    return pool ? pool_alloc(dptr, size, (struct sim_pool *)pool) : CUDA_ERROR_INVALID_VALUE;
}
CUAPI CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    SIM_UNUSED(s);
    return pool ? pool_alloc(dptr, size, (struct sim_pool *)pool) : CUDA_ERROR_INVALID_VALUE;
}
/* Like NVIDIA's, this also accepts memory from cuMemAlloc (freed at once). */
CUAPI CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
    SIM_UNUSED(s);
    return dptr ? sim_dev_free(dptr) : CUDA_ERROR_INVALID_VALUE;
}
CUAPI CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
    SIM_UNUSED(s);
    return dptr ? sim_dev_free(dptr) : CUDA_ERROR_INVALID_VALUE;
}

/* Whether a pool may have this location and allocation type, as CUDA 13 documents it
 * (cuMemGetDefaultMemPool): pinned pools on a device, the host or a host NUMA node;
 * managed pools also with no preferred location (NONE). The simulated host has NUMA
 * nodes 0 and 1. */
static int pool_location_valid(const CUmemLocation *l, int alloc_type) {
    if (!l) return 0;
    if (alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED && alloc_type != CU_MEM_ALLOCATION_TYPE_MANAGED) return 0;
    switch (l->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return l->id >= 0 && l->id < sim_ndevices;
    case CU_MEM_LOCATION_TYPE_HOST: return 1;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return l->id == 0 || l->id == 1;
    case CU_MEM_LOCATION_TYPE_NONE: return alloc_type == CU_MEM_ALLOCATION_TYPE_MANAGED;
    default: return 0;
    }
}

/* A new pool for a location; only pinned device pools are device memory. */
static struct sim_pool *pool_for_location_locked(const CUmemLocation *l, int alloc_type, int is_default) {
    int on_device = l->type == CU_MEM_LOCATION_TYPE_DEVICE && alloc_type == CU_MEM_ALLOCATION_TYPE_PINNED;
    struct sim_pool *p = sim_pool_new_locked(on_device ? l->id : -1, is_default);
    p->loc_type = l->type;
    p->loc_id = l->id;
    p->alloc_type = alloc_type;
    return p;
}

CUAPI CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !props || !pool_location_valid(&props->location, props->allocType))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    *pool = (CUmemoryPool)pool_for_location_locked(&props->location, props->allocType, 0);
    pthread_mutex_unlock(&sim_lock);
    return CUDA_SUCCESS;
}

/* ---- pools by location and allocation type (CUDA 13) ---- */

/* The default and current pool of each host or managed location, made on first use. */
#define MAX_LOCATION_POOLS 16
static struct location_pools {
    int loc_type, loc_id, alloc_type;
    struct sim_pool *def, *cur;
} location_pools[MAX_LOCATION_POOLS];
static int nlocation_pools;

static void forget_current_locked(struct sim_pool *p) {
    for (int i = 0; i < nlocation_pools; i++)
        if (location_pools[i].cur == p) location_pools[i].cur = location_pools[i].def;
}

static struct location_pools *location_pools_locked(const CUmemLocation *l, int alloc_type) {
    /* A managed pool's NUMA-current and NONE locations have no id to tell apart. */
    int id = l->type == CU_MEM_LOCATION_TYPE_DEVICE || l->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? l->id : 0;
    for (int i = 0; i < nlocation_pools; i++) {
        struct location_pools *e = &location_pools[i];
        if (e->loc_type == l->type && e->loc_id == id && e->alloc_type == alloc_type) return e;
    }
    if (nlocation_pools == MAX_LOCATION_POOLS) return NULL;
    struct location_pools *e = &location_pools[nlocation_pools++];
    CUmemLocation at = {.type = l->type, .id = id};
    *e = (struct location_pools){.loc_type = l->type, .loc_id = id, .alloc_type = alloc_type};
    e->def = e->cur = pool_for_location_locked(&at, alloc_type, 1);
    return e;
}

/* cuMemGetDefaultMemPool / cuMemGetMemPool: a device's pinned pools are the device's own
 * (cuDeviceGetDefaultMemPool); every other location has its own, made on first use. */
static CUresult location_pool(CUmemoryPool *pool, CUmemLocation *l, int alloc_type, int current) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !pool_location_valid(l, alloc_type)) return CUDA_ERROR_INVALID_VALUE;
    if (l->type == CU_MEM_LOCATION_TYPE_DEVICE && alloc_type == CU_MEM_ALLOCATION_TYPE_PINNED) {
        pthread_mutex_lock(&sim_lock);
        *pool = (CUmemoryPool)(current ? sim_devices[l->id].current_pool : sim_devices[l->id].default_pool);
        pthread_mutex_unlock(&sim_lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&sim_lock);
    struct location_pools *e = location_pools_locked(l, alloc_type);
    if (e) *pool = (CUmemoryPool)(current ? e->cur : e->def);
    pthread_mutex_unlock(&sim_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUAPI CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *location, int allocType) {
    return location_pool(pool, location, allocType, 0);
}
CUAPI CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, int allocType) {
    return location_pool(pool, location, allocType, 1);
}

/* The pool's own location and type must match, as NVIDIA documents. */
CUAPI CUresult cuMemSetMemPool(CUmemLocation *location, int allocType, CUmemoryPool pool) {
    struct sim_pool *p = (struct sim_pool *)pool;
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool_location_valid(location, allocType)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    CUresult r = pool_valid_locked(p) && p->loc_type == location->type && p->alloc_type == allocType &&
                         (p->loc_type != CU_MEM_LOCATION_TYPE_DEVICE || p->loc_id == location->id)
                     ? CUDA_SUCCESS
                     : CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        if (p->device >= 0) sim_devices[p->device].current_pool = p;
        else {
            struct location_pools *e = location_pools_locked(location, allocType);
            if (e) e->cur = p;
            else r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

/* Blocks still out stay charged until they are freed; then they go straight back. */
CUAPI CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    struct sim_pool *p = (struct sim_pool *)pool;
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&sim_lock);
    CUresult r = pool_valid_locked(p) && !p->is_default ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        trim_locked(p, 0);
        p->destroyed = 1;
        if (p->device >= 0 && sim_devices[p->device].current_pool == p)
            sim_devices[p->device].current_pool = sim_devices[p->device].default_pool;
        forget_current_locked(p);
    }
    pthread_mutex_unlock(&sim_lock);
    if (!r && sim_after_pool_destroy) sim_after_pool_destroy();
    return r;
}

CUAPI CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    struct sim_pool *p = (struct sim_pool *)pool;
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&sim_lock);
    CUresult r = pool_valid_locked(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!r) trim_locked(p, keep);
    pthread_mutex_unlock(&sim_lock);
    return r;
}

/* One table of attributes for both directions: what can be read, and what can be set. */
static CUresult pool_attribute(CUmemoryPool pool, CUmempool_attribute attr, void *value, int set) {
    struct sim_pool *p = (struct sim_pool *)pool;
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    CUresult r = pool_valid_locked(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    cuuint64_t *bytes = (cuuint64_t *)value;
    if (!r) switch (attr) {
        case 1: case 2: case 3: /* the reuse policies: all on, and left on */
            if (!set) *(int *)value = 1;
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            if (set) p->release_threshold = *bytes;
            else *bytes = p->release_threshold;
            break;
        /* the high watermarks may only be reset (to the current value) */
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
            if (set) p->reserved_high = p->reserved;
            else *bytes = p->reserved_high;
            break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (set) p->used_high = p->used;
            else *bytes = p->used_high;
            break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
            if (set) r = CUDA_ERROR_INVALID_VALUE;
            else *bytes = p->reserved;
            break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
            if (set) r = CUDA_ERROR_INVALID_VALUE;
            else *bytes = p->used;
            break;
        default: r = CUDA_ERROR_INVALID_VALUE;
        }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

CUAPI CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmempool_attribute attr, void *value) {
    return pool_attribute(pool, attr, value, 0);
}

CUAPI CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmempool_attribute attr, void *value) {
    return pool_attribute(pool, attr, value, 1);
}

static CUresult device_pool(CUmemoryPool *pool, CUdevice dev, int current) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndevices) return CUDA_ERROR_INVALID_DEVICE;
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    *pool = (CUmemoryPool)(current ? sim_devices[dev].current_pool : sim_devices[dev].default_pool);
    pthread_mutex_unlock(&sim_lock);
    return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) { return device_pool(pool, dev, 0); }
CUAPI CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) { return device_pool(pool, dev, 1); }

CUAPI CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndevices) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_lock);
    struct sim_pool *p = (struct sim_pool *)pool;
    CUresult r = pool_valid_locked(p) && p->device == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!r) sim_devices[dev].current_pool = p;
    pthread_mutex_unlock(&sim_lock);
    return r;
}
