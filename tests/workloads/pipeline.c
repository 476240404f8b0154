/* Workload pipeline: one rank of a pipeline-parallel training job, as torchrun starts it
 * (RANK in the environment), for the per-rank views and the many-ranks benchmark.
 *
 * The rank's stage is RANK % PIPELINE_STAGES (default 4). Every stage holds the same model
 * state (parameters, gradients, Adam's two moments); the first stage also holds the
 * embeddings, the last the logits of the micro-batch in flight. A step runs a 1F1B schedule
 * of MICRO micro-batches: stage s keeps STAGES - s micro-batches' activations alive at
 * once, so the first stage peaks highest - as in real pipelines. Activation sizes vary a
 * little with the rank (sequence lengths differ), so that no two stages' ranks are alike.
 *
 *   pipeline [STEPS]        STEPS training steps (default 20)
 *
 * Prints its truth, and one line
 *   VRAMTRACE_PIPELINE {"pid":P,"rank":R,"stage":S,"peak":B,"oom":B,"sites":{"alloc_embeddings":B,..}}
 * with its peak of live device bytes and, at the first moment of that peak, the live bytes
 * by the function that allocated them. A failed cudaMalloc ends the rank as the demo does;
 * "oom" is the size it asked for (0 where none failed). */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <string.h>
#include <unistd.h>

#define LAYERS 8
#define MICRO 8
#define MAX_STAGES 64
#define NOINLINE __attribute__((noinline))

enum site { PARAMETERS, GRADIENTS, OPTIMIZER, EMBEDDINGS, ACTIVATIONS, LOGITS, WORKSPACE, SITES };
static const char *site_names[SITES] = {
    "alloc_parameters", "alloc_gradients", "alloc_optimizer_state", "alloc_embeddings",
    "forward_activations", "forward_logits", "backward",
};
static unsigned long long live[SITES], live_total, peak, at_peak[SITES];
static long rank;
static int stage;
static unsigned long long oom; /* the size whose cudaMalloc failed, if one did */

static void count(enum site s, long long bytes) {
    live[s] += bytes;
    live_total += bytes;
    if (live_total > peak) {
        peak = live_total;
        memcpy(at_peak, live, sizeof live);
    }
}

static void print_pipeline(void) {
    printf("VRAMTRACE_PIPELINE {\"pid\":%d,\"rank\":%ld,\"stage\":%d,\"peak\":%llu,\"oom\":%llu,\"sites\":{",
           (int)getpid(), rank, stage, peak, oom);
    for (int s = 0, first = 1; s < SITES; s++) {
        if (!at_peak[s]) continue;
        printf("%s\"%s\":%llu", first ? "" : ",", site_names[s], at_peak[s]);
        first = 0;
    }
    printf("}}\n");
    fflush(stdout);
}

NOINLINE void report_oom(size_t tried) {
    fprintf(stderr, "CUDA out of memory. Tried to allocate %.2f GiB\n", (double)tried / GiB);
    oom = tried;
    print_pipeline();
    exit(1); /* the truth is printed at exit */
}

NOINLINE void *device_alloc(enum site s, size_t size) {
    void *p = NULL;
    if (WL_ALLOC("cudaMalloc", 0, size, cudaMalloc(&p, size))) report_oom(size);
    count(s, (long long)size);
    return p;
}

NOINLINE void device_free(enum site s, void *p, size_t size) {
    WL_CHECK(WL_FREE("cudaFree", 0, size, cudaFree(p)));
    count(s, -(long long)size);
}

NOINLINE void *alloc_parameters(size_t size) { return device_alloc(PARAMETERS, size); }
NOINLINE void *alloc_gradients(size_t size) { return device_alloc(GRADIENTS, size); }
NOINLINE void *alloc_optimizer_state(size_t size) { return device_alloc(OPTIMIZER, size); }
NOINLINE void *alloc_embeddings(size_t size) { return device_alloc(EMBEDDINGS, size); }

struct micro { void *acts[LAYERS], *logits; };

NOINLINE void forward_activations(struct micro *m, size_t size) {
    for (int l = 0; l < LAYERS; l++) m->acts[l] = device_alloc(ACTIVATIONS, size);
}
NOINLINE void forward_logits(struct micro *m, size_t size) { m->logits = device_alloc(LOGITS, size); }

NOINLINE void backward(struct micro *m, size_t act, size_t logits, size_t ws) {
    void *workspace = device_alloc(WORKSPACE, ws);
    device_free(WORKSPACE, workspace, ws);
    if (m->logits) device_free(LOGITS, m->logits, logits);
    m->logits = NULL;
    for (int l = LAYERS - 1; l >= 0; l--) device_free(ACTIVATIONS, m->acts[l], act);
}

static long env_long(const char *name, long otherwise) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : otherwise;
}

int main(int argc, char **argv) {
    truth_init(WORKLOAD_NAME);
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    long stages = env_long("PIPELINE_STAGES", 4);
    rank = env_long("RANK", 0);
    if (stages < 1 || stages > MAX_STAGES) stages = 4;
    if (rank < 0) rank = 0;
    stage = (int)(rank % stages);
    int last = stage == stages - 1;
    WL_CHECK(cudaSetDevice(0));

    size_t state = 2 * GiB;
    void *params = alloc_parameters(state), *grads = alloc_gradients(state);
    void *exp_avg = alloc_optimizer_state(state), *exp_avg_sq = alloc_optimizer_state(state);
    void *embeddings = stage == 0 ? alloc_embeddings(3 * GiB) : NULL;

    /* Sequence lengths differ by rank: up to 15 x 512 KiB more per activation. */
    size_t act = 64 * MiB + (size_t)((rank * 7) % 16) * 512 * 1024, ws = 4 * act;
    size_t logits = last ? 1 * GiB : 0;
    int in_flight = (int)(stages - stage);
    if (in_flight > MICRO) in_flight = MICRO;
    struct micro micro[MICRO];
    memset(micro, 0, sizeof micro);
    for (int step = 0; step < steps; step++) {
        /* Warm-up forwards, then a backward and a forward at a time, then cool-down; one
         * call site each, so that every allocation site has one stack. */
        int forwarded = 0, backwarded = 0;
        while (backwarded < MICRO) {
            int forward = forwarded < MICRO && forwarded - backwarded < in_flight;
            if (forward) {
                forward_activations(&micro[forwarded], act);
                if (last) forward_logits(&micro[forwarded], logits);
                forwarded++;
            } else {
                backward(&micro[backwarded], act, logits, ws);
                backwarded++;
            }
        }
    }

    print_pipeline();
    /* A clean exit gives the model back, as a training script's teardown does. */
    if (embeddings) device_free(EMBEDDINGS, embeddings, 3 * GiB);
    device_free(OPTIMIZER, exp_avg_sq, state);
    device_free(OPTIMIZER, exp_avg, state);
    device_free(GRADIENTS, grads, state);
    device_free(PARAMETERS, params, state);
    return 0;
}
