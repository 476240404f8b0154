/* A program with its own small caching allocator, like PyTorch's: it reserves 20 MiB
 * segments with cudaMalloc, hands out 512-byte-rounded blocks inside them, keeps freed
 * blocks cached, and says so through the annotations of interposer/include/vramtrace.h.
 * It also loads NVML, as frameworks do, so vramtrace samples the device layer, and after
 * its last segment holds still until the (simulated) NVML was asked 7 times.
 *
 * Prints its truth, and one line
 *   VRAMTRACE_POOL {"allocated_peak":A,"allocated_end":E,"requested_peak":R,"requested_end":Q,
 *                   "largest_free_end":L,
 *                   "reserved_during_pause":P}
 * with the allocated layer as its own bookkeeping counts it, and
 *   VRAMTRACE_POOL_PEAK {"sites":[{"line":L,"blocks":N,"requested":R}..]}
 * the blocks live at its requested peak, by the source line that asked for them. */
#include "cuda_runtime_sim.h"
#include "vramtrace.h"
#include "wl.h"

#include <dlfcn.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#define SEGMENT (20 * MiB)
#define MAX_SEGMENTS 8
#define MAX_BLOCKS 256

struct block { uintptr_t addr; size_t size, requested; int live, line; };
static uintptr_t segments[MAX_SEGMENTS];
static size_t used_in_segment[MAX_SEGMENTS];
static int nsegments;
static struct block blocks[MAX_BLOCKS];
static int nblocks;
static unsigned long long allocated, allocated_peak, requested, requested_peak, reserved;

static size_t round_up(size_t n) { return (n + 511) & ~(size_t)511; }

static struct block *find_or_carve(size_t size) {
    for (int i = 0; i < nblocks; i++) /* reuse a cached block of the same size */
        if (!blocks[i].live && blocks[i].size == size) return &blocks[i];
    int s = nsegments - 1;
    if (s < 0 || used_in_segment[s] + size > SEGMENT) {
        void *p;
        WL_CHECK(WL_ALLOC("cudaMalloc", 0, SEGMENT, cudaMalloc(&p, SEGMENT)));
        reserved += SEGMENT;
        s = nsegments++;
        segments[s] = (uintptr_t)p;
    }
    struct block *b = &blocks[nblocks++];
    b->addr = segments[s] + used_in_segment[s];
    b->size = size;
    used_in_segment[s] += size;
    return b;
}

/* The live blocks at the requested peak, by the line that asked for them. */
struct site { int line; unsigned long long blocks, requested; };
static struct site peak_sites[8];
static int npeak_sites;

static void take_peak_sites(void) {
    npeak_sites = 0;
    for (int i = 0; i < nblocks; i++) {
        if (!blocks[i].live) continue;
        int s = 0;
        while (s < npeak_sites && peak_sites[s].line != blocks[i].line) s++;
        if (s == npeak_sites) {
            if (s == 8) continue;
            peak_sites[npeak_sites++] = (struct site){blocks[i].line, 0, 0};
        }
        peak_sites[s].blocks++;
        peak_sites[s].requested += blocks[i].requested;
    }
}

#define pool_alloc(n) pool_alloc_at((n), __LINE__)

static struct block *pool_alloc_at(size_t n, int line) {
    struct block *b = find_or_carve(round_up(n));
    b->live = 1;
    b->line = line;
    b->requested = n;
    allocated += b->size;
    requested += b->requested;
    if (allocated > allocated_peak) allocated_peak = allocated;
    if (requested > requested_peak) requested_peak = requested, take_peak_sites();
    vramtrace_block_alloc_hint((void *)b->addr, b->size, b->requested, 0, NULL);
    truth_call("vramtrace_block_alloc", "block_alloc", 1, b->size);
    return b;
}

/* The largest free piece of the reserved segments, from the pool's own block table
 * (blocks are carved in address order within a segment). */
static unsigned long long free_pieces;

static unsigned long long largest_free(void) {
    unsigned long long largest = 0;
    free_pieces = 0;
    for (int s = 0; s < nsegments; s++) {
        uintptr_t at = segments[s], end = segments[s] + SEGMENT;
        for (int i = 0; i < nblocks; i++) {
            if (!blocks[i].live || blocks[i].addr < segments[s] || blocks[i].addr >= end) continue;
            if (blocks[i].addr > at) {
                free_pieces++;
                if (blocks[i].addr - at > largest) largest = blocks[i].addr - at;
            }
            at = blocks[i].addr + blocks[i].size;
        }
        if (end > at) {
            free_pieces++;
            if (end - at > largest) largest = end - at;
        }
    }
    return largest;
}

static void pool_free(struct block *b) {
    vramtrace_block_free_hint((void *)b->addr, 0, NULL);
    truth_call("vramtrace_block_free", "block_free", 1, 0);
    b->live = 0;
    allocated -= b->size;
    requested -= b->requested;
}

static void marker(const char *name) {
    vramtrace_marker_hint(name);
    truth_call("vramtrace_marker", "marker", 1, 0);
}

/* `caching_pool fragment`: cache 30 MiB in 5 MiB pieces, then ask for a 15 MiB block on
 * a card with no room for another segment: the allocator's cudaMalloc fails although
 * the cache holds twice the request. Prints
 *   VRAMTRACE_FRAGMENTED {"cached_free":C,"largest_free":L,"free_blocks":N}
 * and exits 1, as a training job would. */
static int fragment(void) {
    struct block *b[12];
    for (int i = 0; i < 12; i++) b[i] = pool_alloc(5 * MiB);
    for (int i = 0; i < 12; i += 2) pool_free(b[i]);
    printf("VRAMTRACE_FRAGMENTED {\"cached_free\":%llu,\"largest_free\":%llu,\"free_blocks\":%d}\n",
           reserved - allocated, 5 * MiB, 6);
    fflush(stdout);
    size_t n = 15 * MiB;
    void *p;
    int e = WL_ALLOC("cudaMalloc", 0, SEGMENT, cudaMalloc(&p, SEGMENT));
    (void)n;
    fprintf(stderr, "CUDA out of memory. Tried to allocate 15.00 MiB\n");
    return e ? 1 : 0;
}

int main(int argc, char **argv) {
    truth_init("caching-pool");
    if (argc > 1 && strcmp(argv[1], "fragment") == 0) {
        WL_CHECK(cudaSetDevice(0));
        return fragment();
    }
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nvml) return 3;
    unsigned long (*nvml_queries)(void) =
        (unsigned long (*)(void))dlsym(nvml, "vramtrace_sim_nvml_memory_queries");
    if (!nvml_queries) return 3;
    WL_CHECK(cudaSetDevice(0));
    marker("model");
    struct block *weights[8];
    for (int i = 0; i < 8; i++) weights[i] = pool_alloc(3 * MiB + 100 * (size_t)i);
    marker("step");
    struct block *acts[16];
    for (int i = 0; i < 16; i++) acts[i] = pool_alloc(256 * 1024 + 1000 * (size_t)i);
    for (int i = 0; i < 16; i += 2) pool_free(acts[i]);
    /* Hold still while NVML is sampled (30 s at most): device = reserved + the context.
     * No segment is allocated or freed from here on. The "pause" marker comes once a
     * sample began after the last segment, so every sample written after it read the
     * state of the pause; then NVML is asked 6 more times, so that at least 5 samples
     * are written after the marker. */
    unsigned long long reserved_during_pause = reserved;
    unsigned long asked = nvml_queries();
    int waited = 0;
    while (waited < 30000 && nvml_queries() == asked) usleep(5000), waited += 5;
    marker("pause");
    asked = nvml_queries();
    while (waited < 30000 && nvml_queries() < asked + 6) usleep(5000), waited += 5;
    for (int i = 1; i < 16; i += 2) pool_free(acts[i]);
    for (int i = 0; i < 4; i++) pool_free(weights[i]);
    unsigned long long largest_end = largest_free(); /* also counts free_pieces */
    printf("VRAMTRACE_POOL {\"allocated_peak\":%llu,\"allocated_end\":%llu,\"requested_peak\":%llu,"
           "\"requested_end\":%llu,\"largest_free_end\":%llu,\"free_blocks_end\":%llu,"
           "\"reserved_during_pause\":%llu}\n",
           allocated_peak, allocated, requested_peak, requested, largest_end, free_pieces,
           reserved_during_pause);
    printf("VRAMTRACE_POOL_PEAK {\"sites\":[");
    for (int s = 0; s < npeak_sites; s++)
        printf("%s{\"line\":%d,\"blocks\":%llu,\"requested\":%llu}", s ? "," : "",
               peak_sites[s].line, peak_sites[s].blocks, peak_sites[s].requested);
    printf("]}\n");
    fflush(stdout);
    return 0;
}
