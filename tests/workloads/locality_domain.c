/* Workload locality_domain: cuMemCreate on a locality domain of device 1 (CUDA 13.4's
 * CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN). The location's payload is then two bytes,
 * the device and the domain, not the int id; the other two bytes of the union are left
 * as a program that sets only those two finds them (here: not zero). The memory is device
 * 1's. */
#include "cuda_sim.h"
#include "wl.h"

#include <string.h>

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cuInit(0));

    CUmemAllocationProp prop;
    memset(&prop, 0x5a, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = 0;
    prop.win32HandleMetaData = NULL;
    memset(&prop.allocFlags, 0, sizeof prop.allocFlags);
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN;
    SIM_LOCALIZED_DEVICE(&prop.location) = 1;
    SIM_LOCALIZED_DOMAIN(&prop.location) = 1;
    CUmemGenericAllocationHandle h;
    WL_CHECK(WL_ALLOC_OP("cuMemCreate", "create", 1, 4 * MiB, cuMemCreate(&h, 4 * MiB, &prop, 0)));
    WL_CHECK(WL_CALL("cuMemRelease", "release", 0, cuMemRelease(h)));
    truth_live_sub(1, 4 * MiB); /* never mapped: released, it is gone */
    return 0;
}
