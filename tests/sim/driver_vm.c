/* Simulated libcuda.so.1: the virtual memory management API (what PyTorch's
 * expandable segments use).
 * - cuMemAddressReserve takes address space only (PROT_NONE, NORESERVE), never capacity;
 * - cuMemCreate takes physical memory: the handle is charged against its device; with a
 *   host location (HOST, HOST_NUMA on node 0 or 1, HOST_NUMA_CURRENT) it is host memory,
 *   charged to no device (device -1); on a device's locality domain (CUDA 13.4, two
 *   domains a device) it is that device's memory;
 * - cuMemMap makes a range of a reservation accessible (mprotect); mappings do not share
 *   data with each other, which nothing here needs;
 * - physical memory goes back when the handle is released AND its last mapping is gone,
 *   in either order, as in CUDA. */
#include "sim_internal.h"

#include <stdlib.h>
#include <sys/mman.h>

struct sim_handle {
    int device;
    int released;
    int maps;
    size_t size;
};

/* Reservations are few; a list lets cuMemMap check that a range lies inside one. */
struct reservation {
    uintptr_t base;
    size_t size;
    struct reservation *next;
};
static struct reservation *reservations;

static int aligned(size_t n) { return n && n % SIM_GRANULARITY == 0; }

CUAPI CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop, int option) {
    SIM_UNUSED(option);
    if (!gran || !prop) return CUDA_ERROR_INVALID_VALUE;
    *gran = SIM_GRANULARITY;
    return sim_check_init();
}

CUAPI CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                   unsigned long long flags) {
    int dev;
    SIM_UNUSED(addr); /* a hint only, as in CUDA */
    SIM_UNUSED(flags);
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!ptr || !aligned(size) || (alignment & (alignment - 1))) return CUDA_ERROR_INVALID_VALUE;
    if (alignment < SIM_GRANULARITY) alignment = SIM_GRANULARITY;
    size_t span = size + alignment;
    char *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (base > (uintptr_t)raw) munmap(raw, base - (uintptr_t)raw);
    size_t tail = (uintptr_t)raw + span - (base + size);
    if (tail) munmap((void *)(base + size), tail);
    struct reservation *res = malloc(sizeof *res);
    *res = (struct reservation){base, size, NULL};
    pthread_mutex_lock(&sim_lock);
    res->next = reservations;
    reservations = res;
    pthread_mutex_unlock(&sim_lock);
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    struct reservation *found = NULL;
    pthread_mutex_lock(&sim_lock);
    for (struct reservation **pp = &reservations; *pp; pp = &(*pp)->next)
        if ((*pp)->base == (uintptr_t)ptr && (*pp)->size == size) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&sim_lock);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)found->base, found->size);
    free(found);
    return CUDA_SUCCESS;
}

CUAPI CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                           unsigned long long flags) {
    SIM_UNUSED(flags);
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !prop || !aligned(size) || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (prop->location.id < 0 || prop->location.id >= sim_ndevices) return CUDA_ERROR_INVALID_VALUE;
        dev = prop->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN:
        /* Two domains per device; only the two bytes of `localized` are read. */
        if (SIM_LOCALIZED_DEVICE(&prop->location) >= sim_ndevices || SIM_LOCALIZED_DOMAIN(&prop->location) > 1)
            return CUDA_ERROR_INVALID_VALUE;
        dev = SIM_LOCALIZED_DEVICE(&prop->location);
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (prop->location.id != 0 && prop->location.id != 1) return CUDA_ERROR_INVALID_VALUE;
        /* fall through */
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        dev = -1;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct sim_handle *h = calloc(1, sizeof *h);
    struct sim_block *b = malloc(sizeof *b);
    h->device = dev;
    h->size = size;
    *b = (struct sim_block){.key = (uintptr_t)h, .size = size, .charged = size, .device = dev,
                            .space = SP_HANDLE, .kind = K_HANDLE, .extra = h};
    pthread_mutex_lock(&sim_lock);
    int full = dev < 0 ? 0 : sim_charge(dev, size);
    if (!full) sim_table_insert(b);
    pthread_mutex_unlock(&sim_lock);
    if (full) {
        free(h);
        free(b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* Gives the physical memory back once nothing holds it; call with sim_lock held. */
static void maybe_destroy_locked(struct sim_handle *h) {
    if (!h->released || h->maps) return;
    free(sim_table_remove(SP_HANDLE, (uintptr_t)h));
    if (h->device >= 0) sim_uncharge(h->device, h->size);
    free(h);
}

CUAPI CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_find(SP_HANDLE, (uintptr_t)handle);
    struct sim_handle *h = b ? b->extra : NULL;
    CUresult r = h && !h->released ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        h->released = 1;
        maybe_destroy_locked(h);
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

static int inside_reservation_locked(uintptr_t p, size_t size) {
    for (struct reservation *r = reservations; r; r = r->next)
        if (p >= r->base && p + size <= r->base + r->size) return 1;
    return 0;
}

CUAPI CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                        unsigned long long flags) {
    SIM_UNUSED(flags);
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!aligned(size) || offset % SIM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    struct sim_block *m = malloc(sizeof *m);
    pthread_mutex_lock(&sim_lock);
    struct sim_block *hb = sim_table_find(SP_HANDLE, (uintptr_t)handle);
    struct sim_handle *h = hb ? hb->extra : NULL;
    CUresult r = CUDA_SUCCESS;
    if (!h || h->released || offset + size > h->size || !inside_reservation_locked((uintptr_t)ptr, size) ||
        sim_table_find(SP_MAP, (uintptr_t)ptr) ||
        mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE))
        r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        *m = (struct sim_block){.key = (uintptr_t)ptr, .size = size, .device = h->device,
                                .space = SP_MAP, .kind = K_MAP, .extra = h};
        sim_table_insert(m);
        h->maps++;
    }
    pthread_mutex_unlock(&sim_lock);
    if (r) free(m);
    return r;
}

/* Unmaps every mapping that starts inside [ptr, ptr + size), walking from ptr. */
CUAPI CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!aligned(size)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    CUresult r = sim_table_find(SP_MAP, (uintptr_t)ptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (uintptr_t at = (uintptr_t)ptr; !r && at < (uintptr_t)ptr + size;) {
        struct sim_block *m = sim_table_remove(SP_MAP, at);
        if (!m) {
            at += SIM_GRANULARITY; /* a hole in the range: skip it */
            continue;
        }
        madvise((void *)at, m->size, MADV_DONTNEED);
        mprotect((void *)at, m->size, PROT_NONE);
        struct sim_handle *h = m->extra;
        h->maps--;
        maybe_destroy_locked(h);
        at += m->size;
        free(m);
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

CUAPI CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!desc || count == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    CUresult r = sim_table_find(SP_MAP, (uintptr_t)ptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&sim_lock);
    return r;
}
