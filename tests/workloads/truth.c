/* Ground-truth bookkeeping shared by all workloads; see truth.h for the format.
 * The hot path (threads workload: millions of calls) takes no lock: call counters are
 * atomics reached through a per-thread cache, live counters are atomics. */
#include "truth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CALLS 64
#define MAX_DEVICES 16

struct call {
    const char *api, *op;
    unsigned long long count, failed, bytes, failed_bytes;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *workload = WORKLOAD_NAME;
static struct call calls[MAX_CALLS];
static int ncalls;
static long long lower[MAX_DEVICES], upper[MAX_DEVICES], peak_lower[MAX_DEVICES], peak_upper[MAX_DEVICES];
static int max_device;
static size_t (*meminfo)[2];
static size_t nmeminfo;
static int threads, generation, printed;
/* Whether to print at all: read once at load, before any thread of the workload can
 * change the environment (env_race does, without pause). */
static int wanted;
/* Calls a runtime answers itself, never reaching the driver (cudaFree(NULL)): a static
 * runtime shows no event for them. */
static int runtime_only_calls;
/* Memory a workload counts by location (truth_location): single-threaded, under lock. */
#define MAX_LOCATIONS 8
static struct {
    const char *name;
    long long live, peak;
} locations[MAX_LOCATIONS];
static int nlocations;

__attribute__((constructor)) static void truth_wanted(void) {
    const char *v = getenv("WORKLOAD_TRUTH");
    wanted = v && *v && strcmp(v, "0");
}

void truth_runtime_only(void) { __atomic_add_fetch(&runtime_only_calls, 1, __ATOMIC_RELAXED); }

/* Per-thread: whether this thread was counted, and where its recent calls live. */
static __thread int t_generation = -1;
static __thread struct {
    const char *api, *op;
    struct call *entry;
} t_cache[8];

void truth_init(const char *name) {
    workload = name;
    atexit(truth_print);
}

void truth_reset(const char *name) {
    pthread_mutex_lock(&lock);
    workload = name;
    memset(calls, 0, sizeof calls);
    ncalls = 0;
    memset(lower, 0, sizeof lower);
    memset(upper, 0, sizeof upper);
    memset(peak_lower, 0, sizeof peak_lower);
    memset(peak_upper, 0, sizeof peak_upper);
    max_device = 0;
    nlocations = 0;
    memset(locations, 0, sizeof locations);
    nmeminfo = 0;
    threads = 0;
    printed = 0;
    generation++; /* invalidates every thread's cache and "counted" mark */
    pthread_mutex_unlock(&lock);
}

static struct call *entry_for(const char *api, const char *op) {
    int gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (t_generation != gen) {
        memset(t_cache, 0, sizeof t_cache);
        t_generation = gen;
        __atomic_add_fetch(&threads, 1, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < 8; i++)
        if (t_cache[i].api == api && t_cache[i].op == op) return t_cache[i].entry;
    pthread_mutex_lock(&lock);
    struct call *e = NULL;
    for (int i = 0; i < ncalls && !e; i++)
        if (!strcmp(calls[i].api, api) && !strcmp(calls[i].op, op)) e = &calls[i];
    if (!e && ncalls < MAX_CALLS) {
        e = &calls[ncalls++];
        e->api = api;
        e->op = op;
    }
    pthread_mutex_unlock(&lock);
    if (!e) abort(); /* more distinct calls than any workload makes */
    memmove(&t_cache[1], &t_cache[0], sizeof t_cache[0] * 7);
    t_cache[0].api = api;
    t_cache[0].op = op;
    t_cache[0].entry = e;
    return e;
}

void truth_call(const char *api, const char *op, int ok, unsigned long long bytes) {
    struct call *e = entry_for(api, op);
    __atomic_add_fetch(&e->count, 1, __ATOMIC_RELAXED);
    if (ok) __atomic_add_fetch(&e->bytes, bytes, __ATOMIC_RELAXED);
    else {
        __atomic_add_fetch(&e->failed, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&e->failed_bytes, bytes, __ATOMIC_RELAXED);
    }
}

void truth_meminfo(size_t free_bytes, size_t total) {
    pthread_mutex_lock(&lock);
    meminfo = realloc(meminfo, (nmeminfo + 1) * sizeof *meminfo);
    meminfo[nmeminfo][0] = free_bytes;
    meminfo[nmeminfo][1] = total;
    nmeminfo++;
    pthread_mutex_unlock(&lock);
}

static void raise_peak(long long *peak, long long value) {
    long long p = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (value > p && !__atomic_compare_exchange_n(peak, &p, value, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static int dev_index(int device) {
    if (device < 0 || device >= MAX_DEVICES) abort();
    int m = __atomic_load_n(&max_device, __ATOMIC_RELAXED);
    while (device > m && !__atomic_compare_exchange_n(&max_device, &m, device, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return device;
}

/* The upper counter rises before the call; its value then becomes a peak only if the
 * call succeeds, so a failed allocation never inflates the single-threaded peak. */
unsigned long long truth_alloc_begin(int device, unsigned long long bytes) {
    int d = dev_index(device);
    return (unsigned long long)__atomic_add_fetch(&upper[d], (long long)bytes, __ATOMIC_SEQ_CST);
}

void truth_alloc_end(int device, unsigned long long bytes, int ok, unsigned long long token) {
    int d = dev_index(device);
    if (!ok) {
        __atomic_sub_fetch(&upper[d], (long long)bytes, __ATOMIC_SEQ_CST);
        return;
    }
    raise_peak(&peak_upper[d], (long long)token);
    raise_peak(&peak_lower[d], __atomic_add_fetch(&lower[d], (long long)bytes, __ATOMIC_SEQ_CST));
}

void truth_free_begin(int device, unsigned long long bytes) {
    __atomic_sub_fetch(&lower[dev_index(device)], (long long)bytes, __ATOMIC_SEQ_CST);
}

void truth_free_end(int device, unsigned long long bytes, int ok) {
    int d = dev_index(device);
    if (ok) __atomic_sub_fetch(&upper[d], (long long)bytes, __ATOMIC_SEQ_CST);
    else __atomic_add_fetch(&lower[d], (long long)bytes, __ATOMIC_SEQ_CST); /* still live */
}

void truth_live_add(int device, unsigned long long bytes) {
    truth_alloc_end(device, bytes, 1, truth_alloc_begin(device, bytes));
}

void truth_live_sub(int device, unsigned long long bytes) {
    truth_free_begin(device, bytes);
    truth_free_end(device, bytes, 1);
}

void truth_location(const char *location, long long bytes) {
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < nlocations && strcmp(locations[i].name, location)) i++;
    if (i == MAX_LOCATIONS) abort();
    if (i == nlocations) locations[nlocations++].name = location;
    locations[i].live += bytes;
    if (locations[i].live > locations[i].peak) locations[i].peak = locations[i].live;
    pthread_mutex_unlock(&lock);
}

static void print_locations(FILE *f) {
    if (!nlocations) return;
    fputs(",\"location_peak_bytes\":{", f);
    for (int i = 0; i < nlocations; i++) fprintf(f, "%s\"%s\":%lld", i ? "," : "", locations[i].name, locations[i].peak);
    fputs("},\"location_bytes_at_end\":{", f);
    for (int i = 0; i < nlocations; i++) fprintf(f, "%s\"%s\":%lld", i ? "," : "", locations[i].name, locations[i].live);
    fputc('}', f);
}

static void print_devices(FILE *f, const char *key, const long long *v) {
    fprintf(f, ",\"%s\":{", key);
    for (int d = 0; d <= max_device; d++) fprintf(f, "%s\"%d\":%lld", d ? "," : "", d, v[d]);
    fputc('}', f);
}

/* Built in memory and written with one call, so that no other output can split it. */
void truth_print(void) {
    pthread_mutex_lock(&lock);
    if (printed || !wanted) {
        pthread_mutex_unlock(&lock);
        return;
    }
    printed = 1;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "VRAMTRACE_TRUTH {\"workload\":\"%s\",\"pid\":%d,\"ppid\":%d,\"calls\":[", workload,
            (int)getpid(), (int)getppid());
    for (int i = 0; i < ncalls; i++)
        fprintf(f,
                "%s{\"api\":\"%s\",\"op\":\"%s\",\"count\":%llu,\"failed\":%llu,\"bytes\":%llu,\"failed_bytes\":%llu}",
                i ? "," : "", calls[i].api, calls[i].op, calls[i].count, calls[i].failed, calls[i].bytes,
                calls[i].failed_bytes);
    fputc(']', f);
    print_devices(f, "peak_live_bytes", peak_lower);
    print_devices(f, "live_bytes_at_end", lower);
    print_devices(f, "peak_live_bytes_upper", peak_upper);
    print_locations(f);
    fputs(",\"meminfo\":[", f);
    for (size_t i = 0; i < nmeminfo; i++)
        fprintf(f, "%s{\"free\":%zu,\"total\":%zu}", i ? "," : "", meminfo[i][0], meminfo[i][1]);
    fprintf(f, "],\"runtime_only_calls\":%d,\"threads\":%d}\n", runtime_only_calls, threads);
    fclose(f);
    pthread_mutex_unlock(&lock);
    fflush(stdout);
    fputs(buf, stdout);
    fflush(stdout);
    free(buf);
}
