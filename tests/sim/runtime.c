/* Simulated CUDA runtime: libcudart.so.12 and libcudart_static.a, and with
 * RT_VERSION=13050 libcudart.so.13 and libcudart13_static.a, one source.
 *
 * It reaches the driver exactly as NVIDIA's runtime 12.9 (or 13.5) does (see
 * /work/shared/design/cuda-interception.md): dlopen("libcuda.so.1"), the functions it
 * calls by name (13.5: cuDriverGetVersion, refusing a driver older than its major
 * version), ONE dlsym of cuGetProcAddress_v2, then the recorded list of lookups
 * (cudart-<version>-driver-lookups.tsv, turned into CUDART_LOOKUPS by build.rs),
 * switching to the cuGetProcAddress it gets back at version 12000. No driver function is ever called by its symbol name: the driver
 * prototypes are switched off below, and the shared library is linked --no-undefined.
 *
 * Every exported function is a thin shell over a static helper, and no exported function
 * calls another one, so an interposed cudaMalloc is never re-entered from inside. */
#define CUDA_SIM_NO_PROTOTYPES
#include "cuda_runtime_sim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define CUDART_API __attribute__((visibility("default")))
#ifndef RT_VERSION
#define RT_VERSION 12090
#endif
#ifndef CUDART_LOOKUPS
#define CUDART_LOOKUPS "cudart_lookups.inc"
#endif
#define RT_MAX_DEVICES 16

/* The recorded start-up sequence, in order: lookups through cuGetProcAddress_v2 (L) and
 * functions called by their exported name (D). */
static const struct lookup {
    const char *symbol;
    int version;
    unsigned long long flags;
    int direct;
} lookups[] = {
#define L(symbol, version, flags) {symbol, version, flags, 0},
#define D(symbol) {symbol, 0, 0, 1},
#include CUDART_LOOKUPS
#undef L
#undef D
};
#define NLOOKUPS (sizeof lookups / sizeof lookups[0])

/* The driver entry points the runtime itself uses, picked out of the replayed lookups. */
static struct {
    PFN_cuGetProcAddress_v12000 getProcAddress;
    CUresult (*init)(unsigned);
    CUresult (*deviceGetCount)(int *);
    CUresult (*driverGetVersion)(int *);
    CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*ctxSetCurrent)(CUcontext);
    CUresult (*ctxSynchronize)(void);
    CUresult (*streamCreate)(CUstream *, unsigned);
    CUresult (*streamDestroy)(CUstream);
    CUresult (*streamSynchronize)(CUstream);
    CUresult (*memGetInfo)(size_t *, size_t *);
    CUresult (*memAlloc)(CUdeviceptr *, size_t);
    CUresult (*memFree)(CUdeviceptr);
    CUresult (*memAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*memAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*memHostAlloc)(void **, size_t, unsigned);
    CUresult (*memFreeHost)(void *);
    CUresult (*memAllocAsync[2])(CUdeviceptr *, size_t, CUstream); /* [1]: per-thread stream */
    CUresult (*memFreeAsync[2])(CUdeviceptr, CUstream);
    CUresult (*memAllocFromPoolAsync[2])(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*memPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*memPoolDestroy)(CUmemoryPool);
    CUresult (*memPoolTrimTo)(CUmemoryPool, size_t);
    CUresult (*deviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    /* CUDA 13 only (looked up at 13000): pools by location and allocation type */
    CUresult (*memGetDefaultMemPool)(CUmemoryPool *, CUmemLocation *, int);
    CUresult (*memGetMemPool)(CUmemoryPool *, CUmemLocation *, int);
    CUresult (*memsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*getExportTable)(const void **, const CUuuid *);
} drv;

static void *bound[NLOOKUPS];
static pthread_once_t bind_once = PTHREAD_ONCE_INIT;
static cudaError_t init_error;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[RT_MAX_DEVICES];
static int device_count;

static __thread int tls_device;         /* cudaSetDevice, per thread as in CUDA */
static __thread int tls_bound = -1;     /* device whose primary context is current here */
static __thread cudaError_t tls_last_error;

static void *bound_fn(const char *symbol, int version, unsigned long long flags) {
    for (size_t i = 0; i < NLOOKUPS; i++)
        if (!lookups[i].direct && lookups[i].version == version && lookups[i].flags == flags &&
            !strcmp(lookups[i].symbol, symbol))
            return bound[i];
    return NULL;
}

#define NEED(field, symbol, version, flags) \
    ok &= (*(void **)&drv.field = bound_fn(symbol, version, flags)) != NULL

/* Calls a function the runtime uses by its exported name: cuDriverGetVersion (a driver
 * older than the runtime's major version is refused, as NVIDIA's runtime does) or cuInit. */
static cudaError_t call_direct(void *h, const char *symbol) {
    void *f = dlsym(h, symbol);
    if (!f) return cudaErrorInsufficientDriver;
    if (!strcmp(symbol, "cuDriverGetVersion")) {
        int v = 0;
        if (((CUresult(*)(int *))f)(&v) || v / 1000 < RT_VERSION / 1000) return cudaErrorInsufficientDriver;
    } else if (!strcmp(symbol, "cuInit")) {
        ((CUresult(*)(unsigned))f)(0); /* its answer is checked by the cuInit bound below */
    }
    return cudaSuccess;
}

static void bind_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    PFN_cuGetProcAddress_v12000 gpa = h ? (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!gpa) {
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    for (size_t i = 0; i < NLOOKUPS; i++) {
        if (lookups[i].direct) {
            if ((init_error = call_direct(h, lookups[i].symbol))) return;
            continue;
        }
        CUdriverProcAddressQueryResult status;
        void *fn = NULL;
        if (gpa(lookups[i].symbol, &fn, lookups[i].version, lookups[i].flags, &status) != CUDA_SUCCESS)
            fn = NULL;
        bound[i] = fn;
        /* Like NVIDIA's runtime: every lookup after this one goes through the re-fetched
         * lookup function, so a wrapper returned for it sees all of them. */
        if (fn && lookups[i].version == 12000 && !strcmp(lookups[i].symbol, "cuGetProcAddress"))
            gpa = (PFN_cuGetProcAddress_v12000)fn;
    }
    drv.getProcAddress = gpa;
    int ok = 1;
    NEED(init, "cuInit", 2000, 0);
    NEED(deviceGetCount, "cuDeviceGetCount", 2000, 0);
    NEED(driverGetVersion, "cuDriverGetVersion", 2020, 0);
    NEED(primaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0);
    NEED(ctxSetCurrent, "cuCtxSetCurrent", 4000, 0);
    NEED(ctxSynchronize, "cuCtxSynchronize", 2000, 0);
    NEED(streamCreate, "cuStreamCreate", 2000, 0);
    NEED(streamDestroy, "cuStreamDestroy", 4000, 0);
    NEED(streamSynchronize, "cuStreamSynchronize", 2000, 0);
    NEED(memGetInfo, "cuMemGetInfo", 3020, 0);
    NEED(memAlloc, "cuMemAlloc", 3020, 0);
    NEED(memFree, "cuMemFree", 3020, 0);
    NEED(memAllocManaged, "cuMemAllocManaged", 6000, 0);
    NEED(memAllocPitch, "cuMemAllocPitch", 3020, 0);
    NEED(memHostAlloc, "cuMemHostAlloc", 2020, 0);
    NEED(memFreeHost, "cuMemFreeHost", 2000, 0);
    NEED(memAllocAsync[0], "cuMemAllocAsync", 11020, 0);
    NEED(memAllocAsync[1], "cuMemAllocAsync", 11020, 2);
    NEED(memFreeAsync[0], "cuMemFreeAsync", 11020, 0);
    NEED(memFreeAsync[1], "cuMemFreeAsync", 11020, 2);
    NEED(memAllocFromPoolAsync[0], "cuMemAllocFromPoolAsync", 11020, 0);
    NEED(memAllocFromPoolAsync[1], "cuMemAllocFromPoolAsync", 11020, 2);
    NEED(memPoolCreate, "cuMemPoolCreate", 11020, 0);
    NEED(memPoolDestroy, "cuMemPoolDestroy", 11020, 0);
    NEED(memPoolTrimTo, "cuMemPoolTrimTo", 11020, 0);
    NEED(deviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0);
#if RT_VERSION >= 13000
    NEED(memGetDefaultMemPool, "cuMemGetDefaultMemPool", 13000, 0);
    NEED(memGetMemPool, "cuMemGetMemPool", 13000, 0);
#endif
    NEED(memsetD8, "cuMemsetD8", 3020, 0);
    NEED(memcpy, "cuMemcpy", 4000, 0);
    NEED(getExportTable, "cuGetExportTable", 3000, 0);
    if (!ok) {
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    /* NVIDIA's runtime asks for private tables by UUID; do the same so that an
     * interposer sees the call (and must pass it through). The answer is not needed. */
    static const CUuuid private_id = {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                       0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}};
    const void *table = NULL;
    drv.getExportTable(&table, &private_id);
    CUresult r = drv.init(0);
    if (!r) r = drv.deviceGetCount(&device_count);
    if (r) init_error = r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : cudaErrorInitializationError;
}

static cudaError_t rt_init(void) {
    pthread_once(&bind_once, bind_driver);
    return init_error;
}

/* Driver and runtime codes coincide for every error the simulation produces. */
static cudaError_t rt_ret(CUresult r) {
    if (r) tls_last_error = r;
    return r;
}

/* The primary context of this thread's device, retained once per process and made
 * current on first use in each thread, as the real runtime does lazily. */
static cudaError_t rt_ctx(void) {
    cudaError_t e = rt_init();
    if (e) return e;
    int dev = tls_device;
    if (tls_bound == dev) return cudaSuccess;
    if (dev >= device_count || dev >= RT_MAX_DEVICES) return cudaErrorInvalidDevice;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&rt_lock);
    if (!primary[dev]) r = drv.primaryCtxRetain(&primary[dev], dev);
    CUcontext c = primary[dev];
    pthread_mutex_unlock(&rt_lock);
    if (!r) r = drv.ctxSetCurrent(c);
    if (!r) tls_bound = dev;
    return r;
}

#define WITH_CTX(expr)                  \
    do {                                \
        cudaError_t e_ = rt_ctx();      \
        if (e_) return rt_ret(e_);      \
        return rt_ret(expr);            \
    } while (0)

#define DP(p) ((CUdeviceptr *)(void *)(p))

/* ---- allocation ---- */

static cudaError_t rt_malloc(void **p, size_t size) {
    if (!p) return rt_ret(cudaErrorInvalidValue);
    if (size == 0) { /* like NVIDIA's: success, a NULL pointer, no driver call */
        *p = NULL;
        return rt_ret(rt_ctx());
    }
    WITH_CTX(drv.memAlloc(DP(p), size));
}

static cudaError_t rt_free(void *p) {
    cudaError_t e = rt_ctx(); /* cudaFree(NULL) is the classic "initialise CUDA" call */
    if (e || !p) return rt_ret(e);
    return rt_ret(drv.memFree((CUdeviceptr)p));
}

static cudaError_t rt_host_alloc(void **p, size_t size, unsigned flags) {
    WITH_CTX(drv.memHostAlloc(p, size, flags));
}

static cudaError_t rt_malloc_async(void **p, size_t size, cudaStream_t s, int ptsz) {
    if (!p) return rt_ret(cudaErrorInvalidValue);
    WITH_CTX(drv.memAllocAsync[ptsz](DP(p), size, s));
}

static cudaError_t rt_free_async(void *p, cudaStream_t s, int ptsz) {
    WITH_CTX(drv.memFreeAsync[ptsz]((CUdeviceptr)p, s));
}

static cudaError_t rt_malloc_pool(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s, int ptsz) {
    if (!p) return rt_ret(cudaErrorInvalidValue);
    WITH_CTX(drv.memAllocFromPoolAsync[ptsz](DP(p), size, pool, s));
}

CUDART_API cudaError_t cudaMalloc(void **p, size_t size) { return rt_malloc(p, size); }
CUDART_API cudaError_t cudaFree(void *p) { return rt_free(p); }
CUDART_API cudaError_t cudaMallocManaged(void **p, size_t size, unsigned flags) {
    if (!p) return rt_ret(cudaErrorInvalidValue);
    WITH_CTX(drv.memAllocManaged(DP(p), size, flags));
}
CUDART_API cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
    if (!p) return rt_ret(cudaErrorInvalidValue);
    WITH_CTX(drv.memAllocPitch(DP(p), pitch, width, height, 16));
}
CUDART_API cudaError_t cudaMallocHost(void **p, size_t size) { return rt_host_alloc(p, size, 0); }
CUDART_API cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags) { return rt_host_alloc(p, size, flags); }
CUDART_API cudaError_t cudaFreeHost(void *p) { WITH_CTX(drv.memFreeHost(p)); }
CUDART_API cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) { return rt_malloc_async(p, size, s, 0); }
CUDART_API cudaError_t cudaMallocAsync_ptsz(void **p, size_t size, cudaStream_t s) { return rt_malloc_async(p, size, s, 1); }
CUDART_API cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return rt_free_async(p, s, 0); }
CUDART_API cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return rt_free_async(p, s, 1); }
CUDART_API cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
    return rt_malloc_pool(p, size, pool, s, 0);
}
CUDART_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
    return rt_malloc_pool(p, size, pool, s, 1);
}
CUDART_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const cudaMemPoolProps *props) {
    WITH_CTX(drv.memPoolCreate(pool, props));
}
CUDART_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { WITH_CTX(drv.memPoolDestroy(pool)); }
CUDART_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { WITH_CTX(drv.memPoolTrimTo(pool, keep)); }
CUDART_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev) {
    WITH_CTX(drv.deviceGetDefaultMemPool(pool, dev));
}
#if RT_VERSION >= 13000
/* cudaMemLocation and cudaMemAllocationType have the driver's layout and values. */
CUDART_API cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *pool, CUmemLocation *location, int type) {
    WITH_CTX(drv.memGetDefaultMemPool(pool, location, type));
}
CUDART_API cudaError_t cudaMemGetMemPool(cudaMemPool_t *pool, CUmemLocation *location, int type) {
    WITH_CTX(drv.memGetMemPool(pool, location, type));
}
#endif
CUDART_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) { WITH_CTX(drv.memGetInfo(free_bytes, total)); }

/* ---- devices, streams, copies ---- */

/* Since CUDA 12.0 cudaSetDevice initialises the device's primary context at once. */
CUDART_API cudaError_t cudaSetDevice(int dev) {
    cudaError_t e = rt_init();
    if (e) return rt_ret(e);
    if (dev < 0 || dev >= device_count) return rt_ret(cudaErrorInvalidDevice);
    tls_device = dev;
    return rt_ret(rt_ctx());
}
CUDART_API cudaError_t cudaGetDevice(int *dev) {
    cudaError_t e = rt_init();
    if (!e && !dev) e = cudaErrorInvalidValue;
    if (!e) *dev = tls_device;
    return rt_ret(e);
}
CUDART_API cudaError_t cudaGetDeviceCount(int *count) {
    cudaError_t e = rt_init();
    if (!e && !count) e = cudaErrorInvalidValue;
    if (!e) *count = device_count;
    return rt_ret(e);
}
CUDART_API cudaError_t cudaDeviceSynchronize(void) { WITH_CTX(drv.ctxSynchronize()); }
CUDART_API cudaError_t cudaStreamCreate(cudaStream_t *s) { WITH_CTX(drv.streamCreate(s, 0)); }
CUDART_API cudaError_t cudaStreamDestroy(cudaStream_t s) { WITH_CTX(drv.streamDestroy(s)); }
CUDART_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { WITH_CTX(drv.streamSynchronize(s)); }
CUDART_API cudaError_t cudaMemset(void *p, int value, size_t count) {
    WITH_CTX(drv.memsetD8((CUdeviceptr)p, (unsigned char)value, count));
}
CUDART_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind) {
    (void)kind; /* unified addressing: the pointers say where they live */
    WITH_CTX(drv.memcpy((CUdeviceptr)dst, (CUdeviceptr)src, count));
}

/* ---- errors, versions ---- */

CUDART_API cudaError_t cudaGetLastError(void) {
    cudaError_t e = tls_last_error;
    tls_last_error = cudaSuccess;
    return e;
}
CUDART_API cudaError_t cudaPeekAtLastError(void) { return tls_last_error; }

static const struct {
    cudaError_t code;
    const char *name, *text;
} rt_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorDeviceUninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
};

static const char *error_text(cudaError_t e, int want_name) {
    for (size_t i = 0; i < sizeof rt_errors / sizeof rt_errors[0]; i++)
        if (rt_errors[i].code == e) return want_name ? rt_errors[i].name : rt_errors[i].text;
    return want_name ? "cudaErrorUnknown" : "unrecognized error code";
}
CUDART_API const char *cudaGetErrorString(cudaError_t e) { return error_text(e, 0); }
CUDART_API const char *cudaGetErrorName(cudaError_t e) { return error_text(e, 1); }

CUDART_API cudaError_t cudaDriverGetVersion(int *v) {
    cudaError_t e = rt_init();
    if (!e && !v) e = cudaErrorInvalidValue;
    if (!e) e = drv.driverGetVersion(v);
    return rt_ret(e);
}
CUDART_API cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return rt_ret(cudaErrorInvalidValue);
    *v = RT_VERSION;
    return cudaSuccess;
}

/* ---- driver entry points: answered by the driver's own cuGetProcAddress ---- */

static cudaError_t entry_point(const char *symbol, void **fn, int version, unsigned long long flags,
                               cudaDriverEntryPointQueryResult *status) {
    if (!symbol || !fn || flags > cudaEnablePerThreadDefaultStream) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_ctx(); /* like the real one, this initialises the runtime */
    if (e) return rt_ret(e);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = drv.getProcAddress(symbol, fn, version, flags, &st);
    if (status) *status = st;
    return rt_ret(r);
}

/* Since 13.1 the unversioned lookup fails with cudaErrorInvalidValue even for baseline
 * symbols (cudaGetDriverEntryPointByVersion works). */
CUDART_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                               cudaDriverEntryPointQueryResult *status) {
    if (RT_VERSION >= 13010) return rt_ret(cudaErrorInvalidValue);
    return entry_point(symbol, fn, RT_VERSION, flags, status);
}
/* What code built with --default-stream per-thread calls: "default" means per-thread. */
CUDART_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult *status) {
    if (RT_VERSION >= 13010) return rt_ret(cudaErrorInvalidValue);
    return entry_point(symbol, fn, RT_VERSION, flags == cudaEnableDefault ? cudaEnablePerThreadDefaultStream : flags,
                       status);
}
CUDART_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                                        unsigned long long flags,
                                                        cudaDriverEntryPointQueryResult *status) {
    return entry_point(symbol, fn, (int)version, flags, status);
}
