/* Workload driver_dlsym: what cudarc and older PyTorch do. dlopen("libcuda.so.1") and
 * dlsym every driver function by its versioned name, so nothing is interposable by
 * symbol; plus lookups through cuGetProcAddress at two versions:
 * cuMemAlloc@2000 must be the 32-bit-ABI cuMemAlloc (never called), and
 * cuMemAlloc@12000 is cuMemAlloc_v2 (called once, recorded under that name). */
#define _GNU_SOURCE /* dladdr */
#define CUDA_SIM_NO_PROTOTYPES
#include "cuda_sim.h"
#include "wl.h"

#include <dlfcn.h>
#include <string.h>

static void *lib;

static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "driver_dlsym: no %s in libcuda.so.1\n", name);
        exit(2);
    }
    return p;
}

/* A typed pointer named after the symbol it was looked up as. */
#define BIND(name, ...) CUresult (*name)(__VA_ARGS__) = sym(#name)

int main(void) {
    truth_init(WORKLOAD_NAME);
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "driver_dlsym: %s\n", dlerror());
        return 2;
    }
    BIND(cuInit, unsigned);
    BIND(cuDevicePrimaryCtxRetain, CUcontext *, CUdevice);
    BIND(cuCtxSetCurrent, CUcontext);
    BIND(cuMemAlloc_v2, CUdeviceptr *, size_t);
    BIND(cuMemFree_v2, CUdeviceptr);
    BIND(cuMemAllocManaged, CUdeviceptr *, size_t, unsigned);
    BIND(cuMemAllocPitch_v2, CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    BIND(cuMemHostAlloc, void **, size_t, unsigned);
    BIND(cuMemAllocHost_v2, void **, size_t);
    BIND(cuMemFreeHost, void *);
    BIND(cuMemHostRegister_v2, void *, size_t, unsigned);
    BIND(cuMemHostUnregister, void *);
    BIND(cuArrayCreate_v2, CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    BIND(cuArray3DCreate_v2, CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    BIND(cuArrayDestroy, CUarray);
    BIND(cuMemGetInfo_v2, size_t *, size_t *);
    BIND(cuMemAllocAsync, CUdeviceptr *, size_t, CUstream);
    BIND(cuMemFreeAsync, CUdeviceptr, CUstream);
    BIND(cuMemPoolCreate, CUmemoryPool *, const CUmemPoolProps *);
    BIND(cuMemAllocFromPoolAsync, CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    BIND(cuMemPoolTrimTo, CUmemoryPool, size_t);
    BIND(cuMemPoolDestroy, CUmemoryPool);
    BIND(cuMemPoolGetAttribute, CUmemoryPool, CUmempool_attribute, void *);
    BIND(cuGetProcAddress, const char *, void **, int, cuuint64_t);
    BIND(cuGetProcAddress_v2, const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

    CUcontext ctx;
    WL_CHECK(cuInit(0));
    WL_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    WL_CHECK(cuCtxSetCurrent(ctx));

    size_t free_bytes = 0, total = 0;
    if (!WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);

    CUdeviceptr a, b, m, p, fail = 0;
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 16 * MiB, cuMemAlloc_v2(&a, 16 * MiB)));
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 4096, cuMemAlloc_v2(&b, 4096)));
    if (WL_ALLOC("cuMemAlloc_v2", 0, total + 1, cuMemAlloc_v2(&fail, total + 1)) != CUDA_ERROR_OUT_OF_MEMORY || fail)
        exit(3);
    WL_CHECK(WL_ALLOC("cuMemAllocManaged", 0, 2 * MiB, cuMemAllocManaged(&m, 2 * MiB, CU_MEM_ATTACH_GLOBAL)));
    size_t pitch = 0;
    WL_CHECK(WL_CALL("cuMemAllocPitch_v2", "alloc", 1024 * 100, cuMemAllocPitch_v2(&p, &pitch, 700, 100, 4)));
    if (pitch != 1024) exit(3); /* rows pad to 512 bytes */
    truth_live_add(0, pitch * 100);

    void *h1, *h2;
    WL_CHECK(WL_CALL("cuMemHostAlloc", "alloc", 1 * MiB, cuMemHostAlloc(&h1, 1 * MiB, 0)));
    WL_CHECK(WL_CALL("cuMemAllocHost_v2", "alloc", 64 * 1024, cuMemAllocHost_v2(&h2, 64 * 1024)));
    void *plain = malloc(3 * MiB);
    WL_CHECK(WL_CALL("cuMemHostRegister_v2", "host_register", 3 * MiB, cuMemHostRegister_v2(plain, 3 * MiB, 0)));

    /* 1024 x 512 float4 = 8 MiB; 64^3 uchar = 256 KiB; a 3D descriptor with 0 height/depth is 1D */
    CUarray arr2d, arr3d, arr1d;
    CUDA_ARRAY_DESCRIPTOR d2 = {1024, 512, CU_AD_FORMAT_FLOAT, 4};
    CUDA_ARRAY3D_DESCRIPTOR d3 = {64, 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CUDA_ARRAY3D_DESCRIPTOR d1 = {4096, 0, 0, CU_AD_FORMAT_HALF, 2, 0};
    WL_CHECK(WL_ALLOC("cuArrayCreate_v2", 0, 8 * MiB, cuArrayCreate_v2(&arr2d, &d2)));
    WL_CHECK(WL_ALLOC("cuArray3DCreate_v2", 0, 256 * 1024, cuArray3DCreate_v2(&arr3d, &d3)));
    WL_CHECK(WL_ALLOC("cuArray3DCreate_v2", 0, 4096 * 4, cuArray3DCreate_v2(&arr1d, &d1)));

    CUdeviceptr s1, s2;
    WL_CHECK(WL_ALLOC("cuMemAllocAsync", 0, 6 * MiB, cuMemAllocAsync(&s1, 6 * MiB, NULL)));
    CUmemoryPool pool;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    WL_CHECK(WL_CALL("cuMemPoolCreate", "pool_create", 0, cuMemPoolCreate(&pool, &props)));
    WL_CHECK(WL_ALLOC("cuMemAllocFromPoolAsync", 0, 1 * MiB, cuMemAllocFromPoolAsync(&s2, 1 * MiB, pool, NULL)));
    if (!WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    WL_CHECK(WL_FREE("cuMemFreeAsync", 0, 1 * MiB, cuMemFreeAsync(s2, NULL)));
    cuuint64_t reserved = 0;
    WL_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    if (reserved != 2 * MiB) exit(3); /* freed, still cached by the pool */
    WL_CHECK(WL_CALL("cuMemPoolTrimTo", "pool_trim", 0, cuMemPoolTrimTo(pool, 0)));
    WL_CHECK(WL_CALL("cuMemPoolDestroy", "pool_destroy", 0, cuMemPoolDestroy(pool)));
    WL_CHECK(WL_FREE("cuMemFreeAsync", 0, 6 * MiB, cuMemFreeAsync(s1, NULL)));

    /* version-dependent lookups: the same base name, two ABIs */
    void *old_alloc = NULL, *new_alloc = NULL;
    CUdriverProcAddressQueryResult st = -1;
    WL_CHECK(cuGetProcAddress("cuMemAlloc", &old_alloc, 2000, CU_GET_PROC_ADDRESS_DEFAULT));
    WL_CHECK(cuGetProcAddress_v2("cuMemAlloc", &new_alloc, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    Dl_info info;
    if (!old_alloc || !dladdr(old_alloc, &info) || strcmp(info.dli_sname, "cuMemAlloc") || st != 0 ||
        new_alloc != dlsym(lib, "cuMemAlloc_v2") || old_alloc != dlsym(lib, "cuMemAlloc")) {
        fprintf(stderr, "driver_dlsym: cuGetProcAddress returned the wrong cuMemAlloc variant\n");
        exit(3);
    }
    CUresult (*alloc_v2)(CUdeviceptr *, size_t) = new_alloc;
    CUdeviceptr c;
    WL_CHECK(WL_ALLOC("cuMemAlloc_v2", 0, 2 * MiB, alloc_v2(&c, 2 * MiB)));

    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 16 * MiB, cuMemFree_v2(a)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 4096, cuMemFree_v2(b)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 2 * MiB, cuMemFree_v2(c)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, 2 * MiB, cuMemFree_v2(m)));
    WL_CHECK(WL_FREE("cuMemFree_v2", 0, pitch * 100, cuMemFree_v2(p)));
    WL_CHECK(WL_FREE("cuArrayDestroy", 0, 8 * MiB, cuArrayDestroy(arr2d)));
    WL_CHECK(WL_FREE("cuArrayDestroy", 0, 256 * 1024, cuArrayDestroy(arr3d)));
    WL_CHECK(WL_FREE("cuArrayDestroy", 0, 4096 * 4, cuArrayDestroy(arr1d)));
    WL_CHECK(WL_CALL("cuMemFreeHost", "free", 0, cuMemFreeHost(h1)));
    WL_CHECK(WL_CALL("cuMemFreeHost", "free", 0, cuMemFreeHost(h2)));
    WL_CHECK(WL_CALL("cuMemHostUnregister", "host_unregister", 0, cuMemHostUnregister(plain)));
    free(plain);
    if (!WL_CALL("cuMemGetInfo_v2", "meminfo", 0, cuMemGetInfo_v2(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    return 0;
}
