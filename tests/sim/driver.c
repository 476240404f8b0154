/* Simulated libcuda.so.1: initialisation, devices, contexts, streams, events, errors.
 * Memory lives in driver_mem.c / driver_pool.c / driver_vm.c, the cuGetProcAddress
 * table in driver_procaddr.c. Behaviour follows NVIDIA's driver where a profiler can
 * observe it (error codes, who needs cuInit or a current context, capacity, versioned
 * names); everything a profiler cannot see (kernels, real streams) is a benign stub. */
#include "sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
struct sim_device sim_devices[SIM_MAX_DEVICES];
int sim_ndevices;
int sim_initialized;
size_t sim_context_bytes;

/* The context stack is per thread, as in CUDA; the top is the current context. */
#define CTX_STACK_DEPTH 16
static __thread struct sim_ctx *ctx_stack[CTX_STACK_DEPTH];
static __thread int ctx_depth;

static struct sim_ctx *current_ctx(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

static int sim_memory_pools = 1;

static size_t env_size(const char *name, size_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end ? dflt : (size_t)x;
}

CUresult sim_check_init(void) {
    return __atomic_load_n(&sim_initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                                : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sim_current_device(int *device) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_ctx *c = current_ctx();
    /* A released primary context is not usable, like a destroyed one. */
    if (!c || c->destroyed || (c->is_primary && sim_devices[c->device].primary_refs == 0))
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}

int sim_charge(int device, size_t bytes) {
    struct sim_device *d = &sim_devices[device];
    if (bytes > d->capacity - d->used) return -1;
    d->used += bytes;
    return 0;
}

void sim_uncharge(int device, size_t bytes) { sim_devices[device].used -= bytes; }

/* Settings are read once, at the first cuInit, like a driver reading its config. */
CUAPI CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    if (!sim_initialized) {
        sim_ndevices = (int)env_size("VRAMTRACE_SIM_DEVICES", 1);
        if (sim_ndevices > SIM_MAX_DEVICES) sim_ndevices = SIM_MAX_DEVICES;
        size_t cap = env_size("VRAMTRACE_SIM_CAPACITY", 85899345920ull);
        sim_context_bytes = env_size("VRAMTRACE_SIM_CONTEXT_BYTES", 314572800ull);
        /* VRAMTRACE_SIM_MEMORY_POOLS=0: a device without stream-ordered allocation, so
         * clients such as cudarc fall back to cuMemAlloc. */
        sim_memory_pools = env_size("VRAMTRACE_SIM_MEMORY_POOLS", 1) != 0;
        for (int i = 0; i < sim_ndevices; i++) {
            sim_devices[i].capacity = cap;
            sim_devices[i].default_pool = sim_pool_new_locked(i, 1);
            sim_devices[i].current_pool = sim_devices[i].default_pool;
        }
        __atomic_store_n(&sim_initialized, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&sim_lock);
    return sim_ndevices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUAPI CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ---- */

static CUresult check_device(CUdevice dev) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    return dev >= 0 && dev < sim_ndevices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUAPI CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    CUresult r = check_device(ordinal);
    if (r) return r;
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetCount(int *count) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = sim_ndevices;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "NVIDIA H100 80GB HBM3 (vramtrace sim)");
    return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = sim_devices[dev].capacity;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    memset(uuid->bytes, 0x5a, sizeof uuid->bytes);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

/* Plausible H100 values; anything not listed reads as 0, like an unsupported feature. */
CUAPI CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    static const int table[][2] = {
        {1, 1024},  {2, 1024},   {3, 1024},  {4, 64},     {5, 2147483647}, {6, 65535},
        {7, 65535}, {8, 49152},  {9, 65536}, {10, 32},    {12, 65536},     {13, 1980000},
        {14, 1},    {16, 132},   {17, 0},    {18, 0},     {19, 1},         {20, 0},
        {31, 1},    {33, 0x19},  {34, 0},    {35, 0},     {36, 2619000},   {37, 5120},
        {38, 52428800}, {39, 2048}, {40, 3},  {41, 1},     {50, 0},         {75, 9},
        {76, 0},    {81, 233472}, {82, 65536}, {83, 1},   {84, 0},         {86, 1},
        {89, 1},    {97, 227328}, {101, 1},  {102, 1},    {115, 1},        {116, 1},
    };
    *value = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i][0] == attr) *value = table[i][1];
    if (attr == CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) *value = sim_memory_pools;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

static CUresult push_ctx(struct sim_ctx *c) {
    if (ctx_depth == CTX_STACK_DEPTH) return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}

static CUresult primary_retain(CUcontext *pctx, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    struct sim_device *d = &sim_devices[dev];
    pthread_mutex_lock(&sim_lock);
    if (!d->primary) {
        d->primary = calloc(1, sizeof *d->primary);
        d->primary->device = dev;
        d->primary->is_primary = 1;
    }
    /* The context's own footprint is taken when it comes alive, as on a real card. */
    if (d->primary_refs == 0 && sim_charge(dev, sim_context_bytes)) {
        pthread_mutex_unlock(&sim_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->primary_refs++;
    *pctx = (CUcontext)d->primary;
    pthread_mutex_unlock(&sim_lock);
    return CUDA_SUCCESS;
}

/* Allocations are kept when the primary context dies (a real driver frees them); the
 * workloads never rely on that. */
static CUresult primary_release(CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    struct sim_device *d = &sim_devices[dev];
    pthread_mutex_lock(&sim_lock);
    if (d->primary_refs == 0) r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--d->primary_refs == 0) sim_uncharge(dev, sim_context_bytes);
    pthread_mutex_unlock(&sim_lock);
    return r;
}

CUAPI CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) { return primary_retain(pctx, dev); }
CUAPI CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
/* The pre-11.0 name: NVIDIA's runtime asks for cuDevicePrimaryCtxRelease at 7000. */
CUAPI CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }

/* Reset would destroy the context's resources; the simulation keeps accounting as is. */
CUAPI CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return check_device(dev); }
CUAPI CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return check_device(dev); }

CUAPI CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    CUresult r = check_device(dev);
    if (!r) sim_devices[dev].primary_flags = flags;
    return r;
}
CUAPI CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUAPI CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    *flags = sim_devices[dev].primary_flags;
    *active = sim_devices[dev].primary_refs > 0;
    pthread_mutex_unlock(&sim_lock);
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    int full = sim_charge(dev, sim_context_bytes);
    pthread_mutex_unlock(&sim_lock);
    if (full) return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_ctx *c = calloc(1, sizeof *c);
    c->device = dev;
    c->flags = flags;
    *pctx = (CUcontext)c;
    return push_ctx(c); /* a created context becomes current, as in CUDA */
}

CUAPI CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    return ctx_create(pctx, flags, dev);
}
/* cudarc's CudaContext::new_non_primary uses the 12.5 form; its params are ignored. */
CUAPI CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev) {
    SIM_UNUSED(params);
    return ctx_create(pctx, flags, dev);
}

CUAPI CUresult cuCtxDestroy_v2(CUcontext ctx) {
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!c || c->is_primary || c->destroyed) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&sim_lock);
    c->destroyed = 1; /* the struct is leaked on purpose: other threads may still hold it */
    sim_uncharge(c->device, sim_context_bytes);
    pthread_mutex_unlock(&sim_lock);
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c) ctx_stack[i] = NULL;
    if (ctx_depth && !ctx_stack[ctx_depth - 1]) ctx_depth--;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx) {
        if (ctx_depth) ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (ctx_depth == 0) ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = (struct sim_ctx *)ctx;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxGetCurrent(CUcontext *pctx) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)current_ctx();
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    return push_ctx((struct sim_ctx *)ctx);
}

CUAPI CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    if (sim_check_init()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_ctx *c = ctx_stack[--ctx_depth];
    if (pctx) *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxGetDevice(CUdevice *dev) {
    int d;
    CUresult r = sim_current_device(&d);
    if (r) return r;
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    *dev = d;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
    SIM_UNUSED(ctx);
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 3020; /* what real drivers report for contexts made by the _v2 API */
    return sim_check_init();
}

CUAPI CUresult cuCtxGetFlags(unsigned int *flags) {
    int d;
    CUresult r = sim_current_device(&d);
    if (r) return r;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = current_ctx();
    *flags = c->is_primary ? sim_devices[d].primary_flags : c->flags;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxSetFlags(unsigned int flags) {
    int d;
    CUresult r = sim_current_device(&d);
    if (r) return r;
    struct sim_ctx *c = current_ctx();
    if (c->is_primary) sim_devices[d].primary_flags = flags;
    else c->flags = flags;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxGetLimit(size_t *value, int limit) {
    int d;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    *value = limit == 0 ? 1024 : 0; /* CU_LIMIT_STACK_SIZE */
    return sim_current_device(&d);
}

CUAPI CUresult cuCtxSetLimit(int limit, size_t value) {
    int d;
    SIM_UNUSED(limit);
    SIM_UNUSED(value);
    return sim_current_device(&d);
}

CUAPI CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    int d;
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return sim_current_device(&d);
}

/* Synchronising is where a pool gives memory above its release threshold back. */
CUAPI CUresult cuCtxSynchronize(void) {
    int d;
    CUresult r = sim_current_device(&d);
    if (!r) sim_pools_sync(d);
    return r;
}

/* ---- streams and events: no work is ever queued, so they are bookkeeping only ---- */

struct sim_stream {
    int device;
    unsigned int flags;
};

static CUresult stream_create(CUstream *ps, unsigned int flags) {
    int d;
    CUresult r = sim_current_device(&d);
    if (r) return r;
    if (!ps) return CUDA_ERROR_INVALID_VALUE;
    struct sim_stream *s = calloc(1, sizeof *s);
    s->device = d;
    s->flags = flags;
    *ps = (CUstream)s;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuStreamCreate(CUstream *ps, unsigned int flags) { return stream_create(ps, flags); }
CUAPI CUresult cuStreamCreateWithPriority(CUstream *ps, unsigned int flags, int prio) {
    SIM_UNUSED(prio);
    return stream_create(ps, flags);
}

/* Handles 0 (legacy), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) are not objects. */
static int is_special_stream(CUstream s) { return (uintptr_t)s <= 2; }

CUAPI CUresult cuStreamDestroy_v2(CUstream s) {
    int d;
    CUresult r = sim_current_device(&d);
    if (r) return r;
    if (is_special_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream s) {
    int d;
    SIM_UNUSED(s);
    CUresult r = sim_current_device(&d);
    if (!r) sim_pools_sync(d);
    return r;
}

CUAPI CUresult cuStreamSynchronize(CUstream s) { return stream_sync(s); }
CUAPI CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_sync(s); }

CUAPI CUresult cuStreamQuery(CUstream s) {
    int d;
    SIM_UNUSED(s);
    return sim_current_device(&d);
}

CUAPI CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
    int d;
    SIM_UNUSED(s);
    SIM_UNUSED(flags);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    return sim_current_device(&d);
}
CUAPI CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
    return cuStreamWaitEvent(s, e, flags);
}

/* No queue: a host function runs at once, which is a legal ordering. */
CUAPI CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
    int d;
    SIM_UNUSED(s);
    CUresult r = sim_current_device(&d);
    if (r) return r;
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    fn(data);
    return CUDA_SUCCESS;
}

struct sim_event {
    struct timespec t;
};

CUAPI CUresult cuEventCreate(CUevent *pe, unsigned int flags) {
    int d;
    SIM_UNUSED(flags);
    CUresult r = sim_current_device(&d);
    if (r) return r;
    if (!pe) return CUDA_ERROR_INVALID_VALUE;
    struct sim_event *e = calloc(1, sizeof *e);
    clock_gettime(CLOCK_MONOTONIC, &e->t);
    *pe = (CUevent)e;
    return CUDA_SUCCESS;
}

CUAPI CUresult cuEventRecord(CUevent e, CUstream s) {
    SIM_UNUSED(s);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    clock_gettime(CLOCK_MONOTONIC, &((struct sim_event *)e)->t);
    return CUDA_SUCCESS;
}
CUAPI CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
CUAPI CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
    SIM_UNUSED(flags);
    return cuEventRecord(e, s);
}

CUAPI CUresult cuEventQuery(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

CUAPI CUresult cuEventSynchronize(CUevent e) {
    int d;
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (!sim_current_device(&d)) sim_pools_sync(d);
    return CUDA_SUCCESS;
}

CUAPI CUresult cuEventDestroy_v2(CUevent e) {
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    free(e);
    return CUDA_SUCCESS;
}

CUAPI CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!start || !end) return CUDA_ERROR_INVALID_HANDLE;
    struct timespec a = ((struct sim_event *)start)->t, b = ((struct sim_event *)end)->t;
    *ms = (float)((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    return CUDA_SUCCESS;
}

/* ---- errors and private tables ---- */

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static CUresult error_lookup(CUresult err, const char **out, int want_name) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == err) {
            *out = want_name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUAPI CUresult cuGetErrorString(CUresult err, const char **s) { return error_lookup(err, s, 0); }
CUAPI CUresult cuGetErrorName(CUresult err, const char **s) { return error_lookup(err, s, 1); }

/* NVIDIA's runtime asks for private tables by UUID; the simulation has none. */
CUAPI CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    SIM_UNUSED(id);
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_FOUND;
}

/* ---- cuGetProcAddress: the table is in driver_procaddr.c ---- */

CUAPI CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *status) {
    return sim_proc_lookup(symbol, pfn, cudaVersion, flags, status);
}

/* The CUDA 11.3 form; still exported by 12.x drivers and still asked for (@11030). */
CUAPI CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return sim_proc_lookup(symbol, pfn, cudaVersion, flags, NULL);
}

/* Not a CUDA function: the simulated NVML (nvml.c) asks what this process's driver holds
 * on a device, contexts included, as the real NVML learns it from the kernel driver. */
CUAPI int vramtrace_sim_device_memory(int device, size_t *used, size_t *capacity) {
    if (!sim_initialized || device < 0 || device >= sim_ndevices) return -1;
    pthread_mutex_lock(&sim_lock);
    *used = sim_devices[device].used;
    *capacity = sim_devices[device].capacity;
    pthread_mutex_unlock(&sim_lock);
    return 0;
}
