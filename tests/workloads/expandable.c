/* Workload expandable: PyTorch's expandable segments. The VM driver functions come from
 * cudaGetDriverEntryPointByVersion (and one from cudaGetDriverEntryPoint), never by
 * name. Reserve 1 GiB of VA, map 2 MiB and 20 MiB pages, then undo it in the orders
 * that matter: unmap-then-release, release-before-unmap (memory stays counted until
 * the unmap), and a handle mapped twice (counted until its second unmap).
 * Live bytes follow physical memory: from cuMemCreate until released AND unmapped. */
#include "cuda_runtime_sim.h"
#include "wl.h"

#include <stdint.h>
#include <string.h>

static CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
static CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
static CUresult (*unmap)(CUdeviceptr, size_t);
static CUresult (*release)(CUmemGenericAllocationHandle);
static CUresult (*address_free)(CUdeviceptr, size_t);
static CUresult (*granularity)(size_t *, const CUmemAllocationProp *, int);

static void *entry(const char *name) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult status = -1;
    WL_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status));
    if (!fn || status != 0) {
        fprintf(stderr, "expandable: no driver entry point %s\n", name);
        exit(2);
    }
    return fn;
}

static CUmemAllocationProp prop;

static CUmemGenericAllocationHandle new_page(size_t size) {
    CUmemGenericAllocationHandle h;
    /* physical memory is taken here */
    WL_CHECK(WL_ALLOC_OP("cuMemCreate", "create", 0, size, create(&h, size, &prop, 0)));
    return h;
}

static void map_page(CUdeviceptr at, size_t size, CUmemGenericAllocationHandle h) {
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    WL_CHECK(WL_CALL("cuMemMap", "map", size, map(at, size, 0, h, 0)));
    WL_CHECK(WL_CALL("cuMemSetAccess", "set_access", size, set_access(at, size, &access, 1)));
    memset((void *)(uintptr_t)at, 0x5a, 4096); /* mapped memory is usable */
}

static void meminfo(void) {
    size_t free_bytes, total;
    if (!WL_CALL("cudaMemGetInfo", "meminfo", 0, cudaMemGetInfo(&free_bytes, &total)))
        truth_meminfo(free_bytes, total);
}

int main(void) {
    truth_init(WORKLOAD_NAME);
    WL_CHECK(cudaSetDevice(0));
    reserve = entry("cuMemAddressReserve");
    create = entry("cuMemCreate");
    map = entry("cuMemMap");
    set_access = entry("cuMemSetAccess");
    unmap = entry("cuMemUnmap");
    release = entry("cuMemRelease");
    address_free = entry("cuMemAddressFree");
    granularity = entry("cuMemGetAllocationGranularity");
    void *create_again = NULL;
    WL_CHECK(cudaGetDriverEntryPoint("cuMemCreate", &create_again, cudaEnableDefault, NULL));
    if (create_again != (void *)create) exit(3);

    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    WL_CHECK(granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (gran != 2 * MiB) exit(3);
    meminfo();

    CUdeviceptr va;
    WL_CHECK(WL_CALL("cuMemAddressReserve", "reserve", 1 * GiB, reserve(&va, 1 * GiB, 0, 0, 0)));
    CUmemGenericAllocationHandle small = new_page(2 * MiB), large = new_page(20 * MiB), twice = new_page(2 * MiB);
    map_page(va, 2 * MiB, small);
    map_page(va + 2 * MiB, 20 * MiB, large);
    map_page(va + 22 * MiB, 2 * MiB, twice);
    map_page(va + 100 * MiB, 2 * MiB, twice);
    meminfo(); /* 24 MiB of pages */

    /* unmap, then release: gone at the release */
    WL_CHECK(WL_CALL("cuMemUnmap", "unmap", 0, unmap(va, 2 * MiB)));
    truth_free_begin(0, 2 * MiB);
    WL_CHECK(WL_CALL("cuMemRelease", "release", 0, release(small)));
    truth_free_end(0, 2 * MiB, 1);

    /* release while mapped: still counted until the unmap */
    WL_CHECK(WL_CALL("cuMemRelease", "release", 0, release(large)));
    meminfo(); /* 22 MiB: the released 20 MiB page is still mapped */
    truth_free_begin(0, 20 * MiB);
    WL_CHECK(WL_CALL("cuMemUnmap", "unmap", 0, unmap(va + 2 * MiB, 20 * MiB)));
    truth_free_end(0, 20 * MiB, 1);

    /* two mappings: the first unmap and the release keep it, the last unmap frees it */
    WL_CHECK(WL_CALL("cuMemUnmap", "unmap", 0, unmap(va + 22 * MiB, 2 * MiB)));
    WL_CHECK(WL_CALL("cuMemRelease", "release", 0, release(twice)));
    truth_free_begin(0, 2 * MiB);
    WL_CHECK(WL_CALL("cuMemUnmap", "unmap", 0, unmap(va + 100 * MiB, 2 * MiB)));
    truth_free_end(0, 2 * MiB, 1);

    WL_CHECK(WL_CALL("cuMemAddressFree", "unreserve", 0, address_free(va, 1 * GiB)));
    meminfo();
    return 0;
}
