/* Ground truth that every workload keeps about itself and prints as its last stdout line
 * when WORKLOAD_TRUTH is set (the tests set it; a person running the demo does not, and
 * sees only what the program itself says):
 *
 *   VRAMTRACE_TRUTH {"workload":..,"pid":..,"ppid":..,"calls":[{"api","op","count","failed",
 *   "bytes","failed_bytes"}..],"peak_live_bytes":{"0":..},"live_bytes_at_end":{"0":..},
 *   "peak_live_bytes_upper":{"0":..},"meminfo":[{"free","total"}..],"threads":..,
 *   "location_peak_bytes":{"host":..},"location_bytes_at_end":{"host":..}}
 *
 * `bytes` sums what successful calls took, `failed_bytes` what failed calls asked for.
 * Live bytes are device memory the workload holds (never pinned host memory, never the
 * context). Memory that lives elsewhere (host and managed pools, host cuMemCreate) is
 * counted by location name ("host", "host_numa", "managed"), only where a workload says
 * so; the two location keys are printed only then. With threads, a block counts toward the lower bound from after its alloc
 * returned until before its free is called, and toward the upper bound from before the
 * alloc is called until after the free returned; single-threaded, both are exact.
 * Thread-safe. `api` and `op` must be string literals (they are kept, not copied). */
#ifndef VRAMTRACE_TRUTH_H
#define VRAMTRACE_TRUTH_H

#include <stddef.h>

#ifndef WORKLOAD_NAME
#define WORKLOAD_NAME "unnamed"
#endif

/* Starts the record; the truth is printed at exit (also after exit(1)), once. */
void truth_init(const char *workload);
/* In a fork child: forget the parent's record, start this process's own. */
void truth_reset(const char *workload);
void truth_print(void);
/* A call the runtime answers without the driver (e.g. cudaFree(NULL)). */
void truth_runtime_only(void);

/* One call the workload made; bytes only count when ok. */
void truth_call(const char *api, const char *op, int ok, unsigned long long bytes);
void truth_meminfo(size_t free_bytes, size_t total);

/* Live-byte bookkeeping around an allocating / freeing call. */
unsigned long long truth_alloc_begin(int device, unsigned long long bytes);
void truth_alloc_end(int device, unsigned long long bytes, int ok, unsigned long long token);
void truth_free_begin(int device, unsigned long long bytes);
void truth_free_end(int device, unsigned long long bytes, int ok);
/* Single-threaded shorthands: memory becomes live / stops being live now. */
void truth_live_add(int device, unsigned long long bytes);
void truth_live_sub(int device, unsigned long long bytes);
/* Single-threaded: bytes that live at `location` (a string literal) now, +taken/-given. */
void truth_location(const char *location, long long bytes);

#endif
