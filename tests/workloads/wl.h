/* Helpers for workloads: wrap one CUDA call with its ground-truth bookkeeping.
 * GNU statement expressions, so each wrapper still yields the call's own result. */
#ifndef VRAMTRACE_WL_H
#define VRAMTRACE_WL_H

#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

/* An allocation that is device memory the workload holds from now on. */
#define WL_ALLOC_OP(api, op, dev, size, call)                              \
    ({                                                                     \
        unsigned long long t_ = truth_alloc_begin((dev), (size));          \
        int e_ = (call);                                                   \
        truth_alloc_end((dev), (size), e_ == 0, t_);                       \
        truth_call((api), (op), e_ == 0, (size));                          \
        e_;                                                                \
    })
#define WL_ALLOC(api, dev, size, call) WL_ALLOC_OP(api, "alloc", dev, size, call)

/* Freeing `size` live bytes (0 for a pointer the workload never got). */
#define WL_FREE(api, dev, size, call)                                      \
    ({                                                                     \
        truth_free_begin((dev), (size));                                   \
        int e_ = (call);                                                   \
        truth_free_end((dev), (size), e_ == 0);                            \
        truth_call((api), "free", e_ == 0, 0);                             \
        e_;                                                                \
    })

/* Any other recorded call: host memory, pools, VM steps; `bytes` as truth.h defines. */
#define WL_CALL(api, op, bytes, call)                                      \
    ({                                                                     \
        int e_ = (call);                                                   \
        truth_call((api), (op), e_ == 0, (bytes));                         \
        e_;                                                                \
    })

/* A call that must succeed for the workload to make sense. */
#define WL_CHECK(call)                                                     \
    do {                                                                   \
        int e_ = (call);                                                   \
        if (e_) {                                                          \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, e_); \
            exit(2);                                                       \
        }                                                                  \
    } while (0)

/* Driver workloads (cuda_sim.h): the driver started, device 0's primary context current. */
#define WL_PRIMARY_CONTEXT()                                               \
    do {                                                                   \
        CUcontext ctx_;                                                    \
        WL_CHECK(cuInit(0));                                               \
        WL_CHECK(cuDevicePrimaryCtxRetain(&ctx_, 0));                      \
        WL_CHECK(cuCtxSetCurrent(ctx_));                                   \
    } while (0)

#define MiB (1ull << 20)
#define GiB (1ull << 30)

#endif
