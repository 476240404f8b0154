/* State shared by the files of the simulated driver (libcuda.so.1). Not installed, not
 * seen by workloads. Everything here is hidden: the library is built with
 * -fvisibility=hidden and only CUAPI functions are exported, so an LD_PRELOADed library
 * that exports the same CUDA names can never capture the driver's internal calls. */
#ifndef VRAMTRACE_SIM_INTERNAL_H
#define VRAMTRACE_SIM_INTERNAL_H

#include "cuda_sim.h"
#include <pthread.h>
#include <stdint.h>

#define CUAPI __attribute__((visibility("default")))
#define SIM_DRIVER_VERSION 13050 /* a 13.5 driver serves 12.x and 13.x runtimes */
#define SIM_MAX_DEVICES 16
#define SIM_GRANULARITY (2ull << 20)
#define SIM_UNUSED(x) (void)(x)

struct sim_pool;

struct sim_ctx {
    int device;
    int is_primary;
    int destroyed;
    unsigned int flags;
};

struct sim_device {
    size_t capacity;
    size_t used; /* contexts + every kind of device memory; never pinned host memory */
    int primary_refs;
    unsigned int primary_flags;
    struct sim_ctx *primary;
    struct sim_pool *default_pool;
    struct sim_pool *current_pool;
};

/* One lock for all driver state; the hash table keeps each operation O(1). */
extern pthread_mutex_t sim_lock;
extern struct sim_device sim_devices[SIM_MAX_DEVICES];
extern int sim_ndevices;
extern int sim_initialized;
extern size_t sim_context_bytes;

/* Returns CUDA_SUCCESS and the current context's device, or the error a real driver
 * gives without cuInit / without a current context. Takes no lock. */
CUresult sim_current_device(int *device);
CUresult sim_check_init(void);

/* Capacity accounting; call with sim_lock held. */
int sim_charge(int device, size_t bytes); /* 0 on success, -1 if it does not fit */
void sim_uncharge(int device, size_t bytes);

/* Backing store for simulated device memory: real host memory, so memset/memcpy work. */
void *sim_mem_get(size_t bytes);
void sim_mem_put(void *p, size_t bytes);

/* Address spaces of the tracking table: the same address may be, say, both a VA
 * reservation and the mapping at its start. */
enum sim_space { SP_DEV, SP_HOST, SP_HOSTREG, SP_ARRAY, SP_RESERVE, SP_MAP, SP_HANDLE };
enum sim_kind { K_DEVICE, K_MANAGED, K_POOL, K_HOST, K_HOSTREG, K_ARRAY, K_RESERVE, K_MAP,
                K_HANDLE };

struct sim_block {
    uintptr_t key;
    size_t size;     /* bytes requested (pool blocks: requested, see driver_pool.c) */
    size_t charged;  /* bytes charged against the device */
    int device;
    int space;
    int kind;
    void *extra;     /* pool (K_POOL), handle (K_MAP), handle state (K_HANDLE) */
    struct sim_block *next;
};

/* Hash table keyed by (space, key); call with sim_lock held. */
struct sim_block *sim_table_find(int space, uintptr_t key);
void sim_table_insert(struct sim_block *b);
struct sim_block *sim_table_remove(int space, uintptr_t key);

/* cuMemFree_v2's body; cuMemFreeAsync shares it (driver_mem.c). */
CUresult sim_dev_free(CUdeviceptr dptr);

/* Pool hooks used by cuMemFree_v2 and the synchronize calls (driver_pool.c). */
void sim_pool_free_block_locked(struct sim_block *b); /* takes ownership of b */
void sim_pools_sync(int device);
struct sim_pool *sim_pool_new_locked(int device, int is_default);

/* Answers cuGetProcAddress[_v2] (driver_procaddr.c). */
CUresult sim_proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status);

#endif
