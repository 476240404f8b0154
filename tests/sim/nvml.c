/* Stand-in libnvidia-ml.so.1: the NVML calls a memory profiler makes, answered from the
 * simulated driver of this process (through vramtrace_sim_device_memory). Like the real
 * NVML it needs no CUDA context, reports the process's used memory including its CUDA
 * contexts, and asks for a bigger buffer with NVML_ERROR_INSUFFICIENT_SIZE. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define NVMLAPI __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_UNKNOWN = 999,
};

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct sim_nvml_device *nvmlDevice_t;
struct sim_nvml_device { int index; };

static struct sim_nvml_device devices[16];
static int initialized;
static atomic_ulong memory_queries;

/* Not NVML's: how many times nvmlDeviceGetMemoryInfo was answered, so that a workload can
 * hold still until a profiler has sampled it a few times, however slow the machine. */
NVMLAPI unsigned long vramtrace_sim_nvml_memory_queries(void) { return atomic_load(&memory_queries); }

typedef int (*device_memory_fn)(int, size_t *, size_t *);

static device_memory_fn driver_memory(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return NULL;
    device_memory_fn f = (device_memory_fn)dlsym(h, "vramtrace_sim_device_memory");
    dlclose(h);
    return f;
}

static int device_count(void) {
    const char *v = getenv("VRAMTRACE_SIM_DEVICES");
    int n = v && *v ? atoi(v) : 1;
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

/* VRAMTRACE_SIM_NVML_INIT_FAILURES=N: the first N nvmlInit calls fail, as while a
 * driver is still coming up. */
static atomic_int init_calls;

NVMLAPI nvmlReturn_t nvmlInit_v2(void) {
    const char *failures = getenv("VRAMTRACE_SIM_NVML_INIT_FAILURES");
    if (failures && atomic_fetch_add(&init_calls, 1) < atoi(failures))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    for (int i = 0; i < 16; i++) devices[i].index = i;
    initialized = 1;
    return NVML_SUCCESS;
}
NVMLAPI nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
NVMLAPI nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

NVMLAPI nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)device_count();
    return NVML_SUCCESS;
}

NVMLAPI nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

/* What this process's driver holds (0 before it initialised), and the card's size. */
static void usage(nvmlDevice_t d, size_t *used, size_t *capacity) {
    *used = 0;
    *capacity = 85899345920ull;
    const char *v = getenv("VRAMTRACE_SIM_CAPACITY");
    if (v && *v) *capacity = strtoull(v, NULL, 10);
    device_memory_fn f = driver_memory();
    if (f) f(d->index, used, capacity);
}

NVMLAPI nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!device || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    /* Counted before the figures are read: a query counted after some moment reads the
     * state after it. */
    atomic_fetch_add(&memory_queries, 1);
    size_t used, capacity;
    usage(device, &used, &capacity);
    memory->total = capacity;
    memory->used = used;
    memory->free = capacity - used;
    return NVML_SUCCESS;
}

NVMLAPI nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!device || !count) return NVML_ERROR_INVALID_ARGUMENT;
    size_t used, capacity;
    usage(device, &used, &capacity);
    unsigned int n = used > 0 ? 1 : 0;
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    if (n) {
        /* VRAMTRACE_SIM_NVML_PID: the pid NVML reports, as a host pid seen from a
         * container differs from getpid(). */
        const char *pid = getenv("VRAMTRACE_SIM_NVML_PID");
        infos[0].pid = pid && *pid ? (unsigned)atoi(pid) : (unsigned)getpid();
        infos[0].usedGpuMemory = used;
        infos[0].gpuInstanceId = infos[0].computeInstanceId = 0xffffffffu;
    }
    return NVML_SUCCESS;
}
