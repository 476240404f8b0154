/* Workload pool_reuse: one thread destroys a host pool while another makes a host pool,
 * and the driver hands the new pool the destroyed one's handle (sim_reuse_pools). The
 * second thread runs at the worst moment: the pool is gone but cuMemPoolDestroy has not
 * returned yet (sim_after_pool_destroy). Allocations from the new pool are host memory. */
#include "cuda_sim.h"
#include "wl.h"

#include <pthread.h>

static CUmemoryPool made;

static CUmemoryPool host_pool(void) {
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemoryPool pool;
    WL_CHECK(WL_CALL("cuMemPoolCreate", "pool_create", 0, cuMemPoolCreate(&pool, &props)));
    return pool;
}

static void *make_pool(void *arg) {
    (void)arg;
    made = host_pool();
    return NULL;
}

static void meanwhile(void) {
    sim_after_pool_destroy = NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, make_pool, NULL) || pthread_join(t, NULL)) exit(2);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_PRIMARY_CONTEXT();
    sim_reuse_pools = 1;

    CUmemoryPool gone = host_pool();
    sim_after_pool_destroy = meanwhile;
    WL_CHECK(WL_CALL("cuMemPoolDestroy", "pool_destroy", 0, cuMemPoolDestroy(gone)));
    if (made != gone) return 3; /* the handle was not reused: the test shows nothing */

    CUdeviceptr p;
    WL_CHECK(WL_CALL("cuMemAllocFromPoolAsync", "alloc", 8 * MiB, cuMemAllocFromPoolAsync(&p, 8 * MiB, made, NULL)));
    truth_location("host", 8 * MiB);
    WL_CHECK(WL_CALL("cuMemFreeAsync", "free", 0, cuMemFreeAsync(p, NULL)));
    truth_location("host", -(long long)(8 * MiB));
    WL_CHECK(WL_CALL("cuMemPoolDestroy", "pool_destroy", 0, cuMemPoolDestroy(made)));
    WL_CHECK(cuDevicePrimaryCtxRelease_v2(0));
    return 0;
}
