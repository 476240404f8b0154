/* Workload demo: a toy training loop that runs out of memory, for the README and for
 * the OOM view. Model state (parameters, gradients, Adam's exp_avg and exp_avg_sq) is
 * allocated once; each step allocates activations in proportion to a batch size that
 * grows every step, until a cudaMalloc fails. Then it prints a PyTorch-like message and
 * exits 1. Sizes scale with the card (cudaMemGetInfo), so any --sim-capacity works.
 * Every allocation site is its own non-inlined function, so stacks can name it, and
 * names what its memory is for with vramtrace.h's category ranges (a no-op without it).
 * The memory is never touched: a simulated 80 GiB costs no RAM. */
#include "cuda_runtime_sim.h"
#include "vramtrace.h"
#include "wl.h"

#define LAYERS 6
#define NOINLINE __attribute__((noinline))

static double scale; /* card capacity / 80 GiB */
static size_t total_capacity;

static size_t scaled(double bytes_on_80gib) {
    size_t b = (size_t)(bytes_on_80gib * scale);
    return (b + 511) & ~(size_t)511;
}

NOINLINE void report_oom(size_t tried) {
    size_t free_bytes = 0, total = 0;
    if (!WL_CALL("cudaMemGetInfo", "meminfo", 0, cudaMemGetInfo(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
    fprintf(stderr, "CUDA out of memory. Tried to allocate %.2f GiB (GPU 0; total capacity %.2f GiB; free %.2f GiB)\n",
            (double)tried / GiB, (double)total / GiB, (double)free_bytes / GiB);
    exit(1); /* the truth is printed at exit */
}

NOINLINE void *device_alloc(size_t size) {
    void *p = NULL;
    if (WL_ALLOC("cudaMalloc", 0, size, cudaMalloc(&p, size))) report_oom(size);
    return p;
}

NOINLINE void device_free(void *p, size_t size) { WL_CHECK(WL_FREE("cudaFree", 0, size, cudaFree(p))); }

/* A category range's two markers, each a call the truth counts. */
static void category_begin(const char *name) {
    vramtrace_category_begin_hint(name);
    truth_call("vramtrace_marker", "marker", 1, 0);
}

static void category_end(const char *name) {
    vramtrace_category_end_hint(name);
    truth_call("vramtrace_marker", "marker", 1, 0);
}

/* `device_alloc(size)` inside the category range `name`. */
NOINLINE void *alloc_as(const char *name, size_t size) {
    category_begin(name);
    void *p = device_alloc(size);
    category_end(name);
    return p;
}

NOINLINE void *alloc_parameters(size_t size) { return alloc_as("parameters", size); }
NOINLINE void *alloc_gradients(size_t size) { return alloc_as("gradients", size); }
NOINLINE void alloc_optimizer_state(size_t size, void **exp_avg, void **exp_avg_sq) {
    category_begin("optimizer_state");
    *exp_avg = device_alloc(size);
    *exp_avg_sq = device_alloc(size);
    category_end("optimizer_state");
}

NOINLINE void forward_activations(void **acts, size_t size) {
    category_begin("activations");
    for (int l = 0; l < LAYERS; l++) acts[l] = device_alloc(size);
    category_end("activations");
}

/* The backward pass's temporaries count as gradients (as PyTorch's are read). */
NOINLINE void *backward_workspace(size_t size) { return alloc_as("gradients", size); }

NOINLINE void free_activations(void **acts, size_t size, void *workspace, size_t ws_size) {
    for (int l = LAYERS - 1; l >= 0; l--) device_free(acts[l], size);
    device_free(workspace, ws_size);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    size_t free_bytes = 0;
    WL_CHECK(WL_CALL("cudaMemGetInfo", "meminfo", 0, cudaMemGetInfo(&free_bytes, &total_capacity)));
    truth_meminfo(free_bytes, total_capacity);
    scale = (double)total_capacity / (80.0 * GiB);

    size_t state = scaled(4.0 * GiB);
    void *params = alloc_parameters(state), *grads = alloc_gradients(state), *exp_avg, *exp_avg_sq;
    alloc_optimizer_state(state, &exp_avg, &exp_avg_sq);
    size_t live = 4 * state;
    fprintf(stderr, "model state: %.2f GiB\n", (double)live / GiB);

    size_t per_sample = scaled(48.0 * MiB);
    for (int step = 1; step < 100000; step++) {
        int batch = 8 * step;
        size_t act = per_sample * (size_t)batch, ws = act / 2;
        void *acts[LAYERS];
        forward_activations(acts, act);
        void *workspace = backward_workspace(ws);
        fprintf(stderr, "step %d batch %d live %.2f GiB\n", step, batch,
                (double)(live + LAYERS * act + ws) / GiB);
        free_activations(acts, act, workspace, ws);
    }
    (void)params, (void)grads, (void)exp_avg, (void)exp_avg_sq;
    return 0;
}
