/* Simulated libcuda.so.1: cuGetProcAddress / cuGetProcAddress_v2.
 *
 * A lookup names a base symbol ("cuMemAlloc"), the CUDA version the caller was built
 * for and a stream mode. The answer is the newest variant that existed at that version:
 * cuMemAlloc@2000 is the 32-bit-ABI cuMemAlloc, cuMemAlloc@3020 is cuMemAlloc_v2. With
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM a _ptsz/_ptds variant wins where one
 * exists. Versions are those of NVIDIA's cudaTypedefs.h (PFN_<name>_v<version>).
 *
 * The addresses are this library's own functions: the library is linked with
 * -Bsymbolic-functions, so &cuMemAlloc_v2 here is never an LD_PRELOADed namesake. */
#define CUDA_SIM_NO_PROTOTYPES
#include "sim_internal.h"

#include <string.h>

/* base name, exported variant, version it appeared in, per-thread-stream variant */
#define PROC_TABLE(X) \
    X(cuInit, cuInit, 2000, 0) \
    X(cuDriverGetVersion, cuDriverGetVersion, 2020, 0) \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0) \
    X(cuGetProcAddress, cuGetProcAddress_v2, 12000, 0) \
    X(cuGetErrorString, cuGetErrorString, 6000, 0) \
    X(cuGetErrorName, cuGetErrorName, 6000, 0) \
    X(cuGetExportTable, cuGetExportTable, 3000, 0) \
    X(cuDeviceGet, cuDeviceGet, 2000, 0) \
    X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0) \
    X(cuDeviceGetName, cuDeviceGetName, 2000, 0) \
    X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0) \
    X(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040, 0) \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020, 0) \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0) \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, 0) \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, 0) \
    X(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020, 0) \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0) \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0) \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, 0) \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0) \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000, 0) \
    X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 7000, 0) \
    X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2, 11000, 0) \
    X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, 0) \
    X(cuCtxCreate, cuCtxCreate_v2, 3020, 0) \
    X(cuCtxCreate, cuCtxCreate_v4, 12050, 0) \
    X(cuCtxDestroy, cuCtxDestroy_v2, 4000, 0) \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0) \
    X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0) \
    X(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, 0) \
    X(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, 0) \
    X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0) \
    X(cuCtxGetApiVersion, cuCtxGetApiVersion, 3020, 0) \
    X(cuCtxGetFlags, cuCtxGetFlags, 7000, 0) \
    X(cuCtxSetFlags, cuCtxSetFlags, 12010, 0) \
    X(cuCtxGetLimit, cuCtxGetLimit, 3010, 0) \
    X(cuCtxSetLimit, cuCtxSetLimit, 3010, 0) \
    X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050, 0) \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0) \
    X(cuStreamCreate, cuStreamCreate, 2000, 0) \
    X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, 0) \
    X(cuStreamDestroy, cuStreamDestroy_v2, 4000, 0) \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0) \
    X(cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000, 1) \
    X(cuStreamQuery, cuStreamQuery, 2000, 0) \
    X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, 0) \
    X(cuStreamWaitEvent, cuStreamWaitEvent_ptsz, 7000, 1) \
    X(cuLaunchHostFunc, cuLaunchHostFunc, 10000, 0) \
    X(cuEventCreate, cuEventCreate, 2000, 0) \
    X(cuEventRecord, cuEventRecord, 2000, 0) \
    X(cuEventRecord, cuEventRecord_ptsz, 7000, 1) \
    X(cuEventRecordWithFlags, cuEventRecordWithFlags, 11010, 0) \
    X(cuEventQuery, cuEventQuery, 2000, 0) \
    X(cuEventSynchronize, cuEventSynchronize, 2000, 0) \
    X(cuEventDestroy, cuEventDestroy_v2, 4000, 0) \
    X(cuEventElapsedTime, cuEventElapsedTime, 2000, 0) \
    X(cuMemGetInfo, cuMemGetInfo_v2, 3020, 0) \
    X(cuMemAlloc, cuMemAlloc, 2000, 0) \
    X(cuMemAlloc, cuMemAlloc_v2, 3020, 0) \
    X(cuMemFree, cuMemFree, 2000, 0) \
    X(cuMemFree, cuMemFree_v2, 3020, 0) \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, 0) \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0) \
    X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020, 0) \
    X(cuPointerGetAttribute, cuPointerGetAttribute, 4000, 0) \
    X(cuMemHostAlloc, cuMemHostAlloc, 2020, 0) \
    X(cuMemAllocHost, cuMemAllocHost_v2, 3020, 0) \
    X(cuMemFreeHost, cuMemFreeHost, 2000, 0) \
    X(cuMemHostRegister, cuMemHostRegister_v2, 6050, 0) \
    X(cuMemHostUnregister, cuMemHostUnregister, 4000, 0) \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0) \
    X(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, 1) \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0) \
    X(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, 1) \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0) \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020, 1) \
    X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0) \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0) \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0) \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, 0) \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, 0) \
    X(cuMemGetDefaultMemPool, cuMemGetDefaultMemPool, 13000, 0) \
    X(cuMemGetMemPool, cuMemGetMemPool, 13000, 0) \
    X(cuMemSetMemPool, cuMemSetMemPool, 13000, 0) \
    X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0) \
    X(cuMemAddressFree, cuMemAddressFree, 10020, 0) \
    X(cuMemCreate, cuMemCreate, 10020, 0) \
    X(cuMemRelease, cuMemRelease, 10020, 0) \
    X(cuMemMap, cuMemMap, 10020, 0) \
    X(cuMemUnmap, cuMemUnmap, 10020, 0) \
    X(cuMemSetAccess, cuMemSetAccess, 10020, 0) \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0) \
    X(cuArrayCreate, cuArrayCreate_v2, 3020, 0) \
    X(cuArray3DCreate, cuArray3DCreate_v2, 3020, 0) \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0) \
    X(cuMemsetD8, cuMemsetD8_v2, 3020, 0) \
    X(cuMemsetD32, cuMemsetD32_v2, 3020, 0) \
    X(cuMemsetD8Async, cuMemsetD8Async, 3020, 0) \
    X(cuMemsetD8Async, cuMemsetD8Async_ptsz, 7000, 1) \
    X(cuMemsetD32Async, cuMemsetD32Async, 3020, 0) \
    X(cuMemcpy, cuMemcpy, 4000, 0) \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0) \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020, 0) \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020, 0) \
    X(cuMemcpyDtoD, cuMemcpyDtoD_v2, 3020, 0) \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020, 0) \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020, 0) \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020, 0)

/* Only the address is taken, so one dummy type is enough; default visibility keeps the
 * real definitions exported (a hidden declaration would hide them at link time). */
#define DECLARE(base, variant, version, ptds) CUAPI void variant(void);
PROC_TABLE(DECLARE)

static const struct proc_entry {
    const char *base;
    void *fn;
    int version;
    int ptds;
} proc_table[] = {
#define ENTRY(base, variant, version, ptds) {#base, (void *)&variant, version, ptds},
    PROC_TABLE(ENTRY)
};

/* The exported cuGetProcAddress[_v2] (driver.c) are this; they cannot live here, where
 * the table declares every entry point with a dummy type. */
CUresult sim_proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (cudaVersion > SIM_DRIVER_VERSION) return CUDA_ERROR_INVALID_VALUE; /* newer than this driver */
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc_entry *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof proc_table / sizeof proc_table[0]; i++) {
        const struct proc_entry *e = &proc_table[i];
        if (strcmp(e->base, symbol)) continue;
        known = 1;
        if (e->version > cudaVersion || (e->ptds && !per_thread)) continue;
        /* a per-thread variant beats any default one; otherwise the newest wins */
        if (!best || (e->ptds && !best->ptds) || (e->ptds == best->ptds && e->version > best->version))
            best = e;
    }
    if (best) *pfn = best->fn;
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}
