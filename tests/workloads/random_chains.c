/* Allocations and frees through seeded random call chains, for the stack tests: four
 * functions of one shape (same frame size, same place on the stack) chained at random
 * depths, so that consecutive calls share callers, differ only in a caller, or differ
 * only in depth - the cases a stack walker that reuses earlier walks must tell apart.
 * Prints, besides its truth, one line per call, in call order:
 *   VRAMTRACE_CHAIN {"op":"alloc"|"free","size":N,"functions":["innermost", ..., "main"]}
 * Usage: random_chains [CALLS] [SEED] */
#include "wl.h"

#include "cuda_runtime_sim.h"
#include <stdint.h>
#include <string.h>

#define KEEP_FRAME() __asm__ volatile("" ::: "memory")
#define MAX_CHAIN 12
#define MAX_LIVE 64

struct plan {
    int depth;
    int fn[MAX_CHAIN];
    int is_free;
    size_t size;
    void *ptr;
};

__attribute__((noipa)) static void *step(struct plan *p, int level);

/* noipa: neither inlined nor merged with its identical siblings. */
__attribute__((noipa)) static void *chain_leaf(struct plan *p) {
    if (p->is_free) {
        WL_CHECK(WL_FREE("cudaFree", 0, p->size, cudaFree(p->ptr)));
        KEEP_FRAME();
        return NULL;
    }
    void *ptr = NULL;
    WL_CHECK(WL_ALLOC("cudaMalloc", 0, p->size, cudaMalloc(&ptr, p->size)));
    KEEP_FRAME();
    return ptr;
}

#define CHAIN_FN(name)                                                     \
    __attribute__((noipa)) static void *name(struct plan *p, int level) {    \
        void *r = step(p, level + 1);                                      \
        KEEP_FRAME();                                                      \
        return r;                                                          \
    }
CHAIN_FN(chain_a)
CHAIN_FN(chain_b)
CHAIN_FN(chain_c)
CHAIN_FN(chain_d)

static void *(*const CHAIN[4])(struct plan *, int) = {chain_a, chain_b, chain_c, chain_d};
static const char *const NAMES[4] = {"chain_a", "chain_b", "chain_c", "chain_d"};

__attribute__((noipa)) static void *step(struct plan *p, int level) {
    /* A tail call here would leave step's frame out: the chain is what the truth says. */
    void *r = level == p->depth ? chain_leaf(p) : CHAIN[p->fn[level]](p, level);
    KEEP_FRAME();
    return r;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_random(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 2000;
    if (argc > 2) rng ^= strtoull(argv[2], NULL, 10) * 0x2545f4914f6cdd1dull;
    truth_init("random-chains");
    WL_CHECK(cudaSetDevice(0));
    void *live[MAX_LIVE];
    size_t live_size[MAX_LIVE];
    int n_live = 0;
    struct plan p;
    for (int i = 0; i < calls; i++) {
        memset(&p, 0, sizeof p);
        /* Often the same chain again, sometimes one caller changed, else a new chain. */
        p.depth = (int)(next_random() % (MAX_CHAIN + 1));
        for (int l = 0; l < p.depth; l++) p.fn[l] = (int)(next_random() % 4);
        p.is_free = n_live == MAX_LIVE || (n_live > 0 && next_random() % 2);
        int slot = 0;
        if (p.is_free) {
            slot = (int)(next_random() % (uint64_t)n_live);
            p.ptr = live[slot];
            p.size = live_size[slot];
        } else {
            p.size = (size_t)(i + 1) * 4096;
        }
        int repeats = 1 + (int)(next_random() % 3);
        for (int r = 0; r < repeats && i < calls; r++) {
            void *got = step(&p, 0);
            printf("VRAMTRACE_CHAIN {\"op\":\"%s\",\"size\":%zu,\"functions\":[\"chain_leaf\"",
                   p.is_free ? "free" : "alloc", p.size);
            for (int l = p.depth - 1; l >= 0; l--) printf(",\"step\",\"%s\"", NAMES[p.fn[l]]);
            printf(",\"step\",\"main\"]}\n");
            if (p.is_free) {
                live[slot] = live[--n_live];
                live_size[slot] = live_size[n_live];
                break;
            }
            live[n_live] = got;
            live_size[n_live++] = p.size;
            if (n_live == MAX_LIVE) break;
            p.size += 1;
            /* The same chain, or one caller swapped for a same-shaped sibling. */
            if (p.depth > 0 && next_random() % 2) p.fn[next_random() % (uint64_t)p.depth] ^= 1;
            i++;
        }
    }
    while (n_live > 0) {
        n_live--;
        WL_CHECK(WL_FREE("cudaFree", 0, live_size[n_live], cudaFree(live[n_live])));
    }
    fflush(stdout);
    return 0;
}
