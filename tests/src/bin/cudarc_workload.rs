//! Workload (d): cudarc, a real third-party CUDA client that `dlopen`s libcuda and
//! `dlsym`s every driver function by name. Its allocations go through `cuMemAllocAsync`
//! when the device reports memory-pool support and `cuMemAlloc_v2` otherwise (the
//! simulated driver reports none with `VRAMTRACE_SIM_MEMORY_POOLS=0`).
//!
//! Prints its own ground truth, counted here, independently of vramtrace.

use cudarc::driver::CudaContext;
use vramtrace_tests::truth::Truth;

fn main() {
    let ctx = CudaContext::new(0).expect("a (simulated) CUDA device");
    let pools = ctx.has_async_alloc();
    let (alloc_api, free_api) = if pools {
        ("cuMemAllocAsync", "cuMemFreeAsync")
    } else {
        ("cuMemAlloc_v2", "cuMemFree_v2")
    };
    let stream = ctx.default_stream();
    let mut truth = Truth::new("cudarc");
    let elem = std::mem::size_of::<f32>() as u64;

    let mut kept = Vec::new();
    for round in 0..4usize {
        let n = 1024 * (round + 1);
        let zeros = stream.alloc_zeros::<f32>(n).expect("alloc_zeros");
        truth.alloc(alloc_api, 0, n as u64 * elem);
        let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let copy = stream.clone_htod(&host).expect("clone_htod");
        truth.alloc(alloc_api, 0, n as u64 * elem);
        let back = stream.clone_dtoh(&copy).expect("clone_dtoh");
        assert_eq!(back, host, "copies round-trip through the simulated device");
        drop(copy);
        truth.free(free_api, 0, n as u64 * elem);
        kept.push(zeros);
    }
    stream.synchronize().expect("synchronize");
    for slice in kept.drain(..) {
        let bytes = slice.len() as u64 * elem;
        drop(slice);
        truth.free(free_api, 0, bytes);
    }
    stream.synchronize().expect("synchronize");
    truth.set("pools", serde_json::Value::Bool(pools));
    truth.print();
}
