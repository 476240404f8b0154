// Built by nvcc with its default static runtime (no cudaMalloc symbol to interpose):
// allocations must still be seen, at the driver. Prints its own counts.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    const size_t sizes[] = {1 << 20, 64 << 20, 256 << 20};
    void *p[3];
    size_t total = 0;
    for (int i = 0; i < 3; i++) {
        if (cudaMalloc(&p[i], sizes[i]) != cudaSuccess) return 1;
        total += sizes[i];
    }
    void *big;
    cudaError_t e = cudaMalloc(&big, (size_t)1 << 50);  // fails: out of memory
    for (int i = 0; i < 3; i++) cudaFree(p[i]);
    printf("{\"allocations\":3,\"bytes\":%zu,\"failed\":%d}\n", total, e != cudaSuccess);
    return 0;
}
