/* Simulated libcuda.so.1: the tracking table, plain device / managed / pitched
 * allocations, pinned host memory, arrays, memset and memcpy.
 * Device memory is host memory, so copies work. Blocks over 1 MiB are NORESERVE
 * anonymous mappings, so a simulated 80 GiB card costs no RAM unless it is touched. */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SMALL_BLOCK (1u << 20)

void *sim_mem_get(size_t bytes) {
    if (bytes <= SMALL_BLOCK) {
        void *p = NULL;
        return posix_memalign(&p, 512, bytes) ? NULL : p;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void sim_mem_put(void *p, size_t bytes) {
    if (bytes <= SMALL_BLOCK) free(p);
    else munmap(p, bytes);
}

/* ---- hash table: chained, power-of-two buckets, doubled at load 1 ---- */

static struct sim_block **buckets;
static size_t nbuckets, nblocks;

static size_t slot(int space, uintptr_t key, size_t n) {
    uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull ^ (uint64_t)space * 0xc2b2ae3d27d4eb4full;
    return (size_t)(h >> 20) & (n - 1);
}

static void grow(void) {
    size_t n = nbuckets ? nbuckets * 2 : 4096;
    struct sim_block **nb = calloc(n, sizeof *nb);
    for (size_t i = 0; i < nbuckets; i++)
        for (struct sim_block *b = buckets[i], *next; b; b = next) {
            next = b->next;
            size_t s = slot(b->space, b->key, n);
            b->next = nb[s];
            nb[s] = b;
        }
    free(buckets);
    buckets = nb;
    nbuckets = n;
}

struct sim_block *sim_table_find(int space, uintptr_t key) {
    if (!nbuckets) return NULL;
    for (struct sim_block *b = buckets[slot(space, key, nbuckets)]; b; b = b->next)
        if (b->key == key && b->space == space) return b;
    return NULL;
}

void sim_table_insert(struct sim_block *b) {
    if (nblocks >= nbuckets) grow();
    size_t s = slot(b->space, b->key, nbuckets);
    b->next = buckets[s];
    buckets[s] = b;
    nblocks++;
}

struct sim_block *sim_table_remove(int space, uintptr_t key) {
    if (!nbuckets) return NULL;
    for (struct sim_block **pp = &buckets[slot(space, key, nbuckets)]; *pp; pp = &(*pp)->next)
        if ((*pp)->key == key && (*pp)->space == space) {
            struct sim_block *b = *pp;
            *pp = b->next;
            nblocks--;
            return b;
        }
    return NULL;
}

/* ---- device memory ---- */

/* Charge first, then get the memory outside the lock, so threads allocate in parallel. */
static CUresult dev_alloc(CUdeviceptr *dptr, size_t size, int kind) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    int full = sim_charge(dev, size);
    pthread_mutex_unlock(&sim_lock);
    if (full) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = sim_mem_get(size);
    struct sim_block *b = p ? malloc(sizeof *b) : NULL;
    pthread_mutex_lock(&sim_lock);
    if (!b) {
        sim_uncharge(dev, size);
        pthread_mutex_unlock(&sim_lock);
        if (p) sim_mem_put(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *b = (struct sim_block){.key = (uintptr_t)p, .size = size, .charged = size, .device = dev,
                            .space = SP_DEV, .kind = kind};
    sim_table_insert(b);
    pthread_mutex_unlock(&sim_lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Frees any device allocation, pool blocks included (they go back to their pool). */
CUresult sim_dev_free(CUdeviceptr dptr) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (dptr == 0) return CUDA_SUCCESS;
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_remove(SP_DEV, (uintptr_t)dptr);
    if (b && b->kind == K_POOL) {
        sim_pool_free_block_locked(b);
        b = NULL;
        r = CUDA_SUCCESS;
    } else if (b) {
        sim_uncharge(b->device, b->charged);
    } else {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&sim_lock);
    if (b) {
        sim_mem_put((void *)(uintptr_t)b->key, b->size);
        free(b);
    }
    return r;
}

CUAPI CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) { return dev_alloc(dptr, size, K_DEVICE); }
CUAPI CUresult cuMemFree_v2(CUdeviceptr dptr) { return sim_dev_free(dptr); }

/* The 32-bit-ABI originals (CUDA 2.0), so that version-dependent lookups can be told
 * apart; a 64-bit process could not use them, and neither can it here. */
CUAPI CUresult cuMemAlloc(unsigned int *dptr, unsigned int size) {
    SIM_UNUSED(dptr);
    SIM_UNUSED(size);
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUAPI CUresult cuMemFree(unsigned int dptr) {
    SIM_UNUSED(dptr);
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUAPI CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    SIM_UNUSED(flags);
    return dev_alloc(dptr, size, K_MANAGED);
}

/* Rows are padded to 512 bytes, so the allocation is pitch * height. */
CUAPI CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                  unsigned int elementSize) {
    if (!pitch || width == 0 || height == 0 ||
        (elementSize != 4 && elementSize != 8 && elementSize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511;
    CUresult r = dev_alloc(dptr, p * height, K_DEVICE);
    if (!r) *pitch = p;
    return r;
}

CUAPI CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    *free_bytes = sim_devices[dev].capacity - sim_devices[dev].used;
    *total = sim_devices[dev].capacity;
    pthread_mutex_unlock(&sim_lock);
    return CUDA_SUCCESS;
}

CUAPI CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr) {
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_find(SP_DEV, (uintptr_t)dptr); /* block starts only */
    if (b && base) *base = dptr;
    if (b && size) *size = b->size;
    pthread_mutex_unlock(&sim_lock);
    return b ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUAPI CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) {
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_find(SP_DEV, (uintptr_t)ptr);
    int host = !b && (b = sim_table_find(SP_HOST, (uintptr_t)ptr)) != NULL;
    struct sim_block copy = b ? *b : (struct sim_block){0};
    pthread_mutex_unlock(&sim_lock);
    if (!b) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)sim_devices[copy.device].primary; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = copy.kind == K_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = copy.device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = copy.size; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- pinned host memory: tracked, never charged against a device ---- */

static CUresult host_track(int space, int kind, void *p, size_t size, int dev) {
    struct sim_block *b = malloc(sizeof *b);
    *b = (struct sim_block){.key = (uintptr_t)p, .size = size, .device = dev, .space = space, .kind = kind};
    pthread_mutex_lock(&sim_lock);
    int dup = sim_table_find(space, b->key) != NULL;
    if (!dup) sim_table_insert(b);
    pthread_mutex_unlock(&sim_lock);
    if (dup) free(b);
    return dup ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_SUCCESS;
}

static CUresult host_alloc(void **pp, size_t size) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!pp || size == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = malloc(size);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    host_track(SP_HOST, K_HOST, p, size, dev);
    *pp = p;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags) {
    SIM_UNUSED(flags);
    return host_alloc(pp, size);
}
CUAPI CUresult cuMemAllocHost_v2(void **pp, size_t size) { return host_alloc(pp, size); }

CUAPI CUresult cuMemFreeHost(void *p) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_remove(SP_HOST, (uintptr_t)p);
    pthread_mutex_unlock(&sim_lock);
    if (!b) return CUDA_ERROR_INVALID_VALUE;
    free(p);
    free(b);
    return CUDA_SUCCESS;
}

CUAPI CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags) {
    int dev;
    SIM_UNUSED(flags);
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!p || size == 0) return CUDA_ERROR_INVALID_VALUE;
    return host_track(SP_HOSTREG, K_HOSTREG, p, size, dev);
}

CUAPI CUresult cuMemHostUnregister(void *p) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_remove(SP_HOSTREG, (uintptr_t)p);
    pthread_mutex_unlock(&sim_lock);
    free(b);
    return b ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* ---- arrays: charged, but no backing store (nothing in the simulation reads them) ---- */

static size_t format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static CUresult array_create(CUarray *ph, size_t w, size_t h, size_t d, CUarray_format f, unsigned ch) {
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    size_t fb = format_bytes(f);
    if (!ph || w == 0 || fb == 0 || (ch != 1 && ch != 2 && ch != 4)) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = w * (h ? h : 1) * (d ? d : 1) * ch * fb;
    struct sim_block *b = malloc(sizeof *b);
    pthread_mutex_lock(&sim_lock);
    if (sim_charge(dev, bytes)) {
        pthread_mutex_unlock(&sim_lock);
        free(b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* The handle is the tracking record itself: unique, and never dereferenced by users. */
    *b = (struct sim_block){.key = (uintptr_t)b, .size = bytes, .charged = bytes, .device = dev,
                            .space = SP_ARRAY, .kind = K_ARRAY};
    sim_table_insert(b);
    pthread_mutex_unlock(&sim_lock);
    *ph = (CUarray)b;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuArrayCreate_v2(CUarray *ph, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return array_create(ph, d->Width, d->Height, 1, d->Format, d->NumChannels);
}

CUAPI CUresult cuArray3DCreate_v2(CUarray *ph, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return array_create(ph, d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
}

CUAPI CUresult cuArrayDestroy(CUarray h) {
    pthread_mutex_lock(&sim_lock);
    struct sim_block *b = sim_table_remove(SP_ARRAY, (uintptr_t)h);
    if (b) sim_uncharge(b->device, b->charged);
    pthread_mutex_unlock(&sim_lock);
    free(b);
    return b ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- memset / memcpy: synchronous, on the backing store, unchecked like real DMA ---- */

static CUresult need_ctx(void) {
    int dev;
    return sim_current_device(&dev);
}

static CUresult set8(CUdeviceptr d, unsigned char v, size_t n) {
    CUresult r = need_ctx();
    if (!r && n) memset((void *)(uintptr_t)d, v, n);
    return r;
}

static CUresult copy(void *dst, const void *src, size_t n) {
    CUresult r = need_ctx();
    if (!r && n) memmove(dst, src, n);
    return r;
}

#define DPTR(x) ((void *)(uintptr_t)(x))

CUAPI CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return set8(d, v, n); }
CUAPI CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return set8(d, v, n);
}
CUAPI CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return set8(d, v, n);
}
CUAPI CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
    CUresult r = need_ctx();
    unsigned int *p = DPTR(d);
    for (size_t i = 0; !r && i < n; i++) p[i] = v;
    return r;
}
CUAPI CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return cuMemsetD32_v2(d, v, n);
}

CUAPI CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(DPTR(dst), DPTR(src), n); }
CUAPI CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return copy(DPTR(dst), DPTR(src), n);
}
CUAPI CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return copy(DPTR(dst), src, n); }
CUAPI CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy(dst, DPTR(src), n); }
CUAPI CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(DPTR(dst), DPTR(src), n); }
CUAPI CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return copy(DPTR(dst), src, n);
}
CUAPI CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return copy(dst, DPTR(src), n);
}
CUAPI CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    SIM_UNUSED(s);
    return copy(DPTR(dst), DPTR(src), n);
}
