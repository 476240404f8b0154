/* The subset of NVIDIA's cuda_runtime_api.h (CUDA 12.9) that the simulated runtime
 * exports and the workloads call. Same names, signatures and values as the real header. */
#ifndef VRAMTRACE_CUDA_RUNTIME_SIM_H
#define VRAMTRACE_CUDA_RUNTIME_SIM_H

#include "cuda_sim.h"

typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef CUmemoryPool cudaMemPool_t;
typedef CUmemPoolProps cudaMemPoolProps; /* the real struct has exactly this layout */
typedef int cudaDriverEntryPointQueryResult;

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorSymbolNotFound = 500,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorNotSupported = 801,
};

enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
       cudaMemcpyDefault };
#define cudaHostAllocDefault 0
#define cudaMemAttachGlobal 1
#define cudaMemAllocationTypePinned 1
#define cudaMemAllocationTypeManaged 2
#define cudaMemLocationTypeNone 0
#define cudaMemLocationTypeDevice 1
#define cudaMemLocationTypeHost 2
#define cudaMemLocationTypeHostNuma 3
#define cudaMemLocationTypeHostNumaCurrent 4
typedef CUmemLocation cudaMemLocation; /* the real struct has exactly this layout */
/* cudaGetDriverEntryPoint flags */
#define cudaEnableDefault 0
#define cudaEnableLegacyStream 1
#define cudaEnablePerThreadDefaultStream 2

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const cudaMemPoolProps *props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
/* CUDA 13 */
cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *memPool, cudaMemLocation *location, int type);
cudaError_t cudaMemGetMemPool(cudaMemPool_t *memPool, cudaMemLocation *location, int type);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *driverStatus);

#endif
