/* A stand-in for a library that takes device memory from the driver itself, below any
 * allocator of the program's: built as libnccl.so.2 (NCCL's communication buffers) and
 * libcublas.so.12 (cuBLAS's workspace), the file names of the real ones, which is all of
 * them vramtrace reads, and as libvt_plugin.so (a library of no known name). LIBRARY_RESERVE names its one function: it allocates `n` bytes
 * and keeps them. The calls are recorded in the program's truth (-rdynamic). */
#include "cuda_runtime_sim.h"
#include "wl.h"

static void *buffer;

int LIBRARY_RESERVE(size_t n) { return WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&buffer, n)); }
