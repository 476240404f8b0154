/* A stand-in for a library that takes device memory from the driver itself, below any
 * allocator of the program's: built as libnccl.so.2 (NCCL's communication buffers) and
 * libcublas.so.12 (cuBLAS's workspace), the file names of the real ones, which is all of
 * them vramtrace reads, and as libvt_plugin.so (a library of no known name).
 * LIBRARY_RESERVE names its function that allocates `n` bytes and keeps them. The calls are recorded in the program's truth (-rdynamic). */
#include "cuda_runtime_sim.h"
#include "wl.h"

#define JOIN(a, b) a##b
#define NAMED(a, b) JOIN(a, b)

static void *buffer;

int LIBRARY_RESERVE(size_t n) { return WL_ALLOC("cudaMalloc", 0, n, cudaMalloc(&buffer, n)); }

/* Its buffer (`vt_nccl_buffers_at`): a program may make it a pool of its tensors, as
 * PyTorch does of memory from ncclMemAlloc. */
void *NAMED(LIBRARY_RESERVE, _at)(void) { return buffer; }
