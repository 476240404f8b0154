//! vramtrace beside a GPU-sharing layer that overrides `dlsym` and `cuGetProcAddress`
//! itself (`sim/libvt_sharing_layer.so`, built like HAMi-core's libvgpu.so), preloaded in
//! either order: the layer must see, and be able to refuse, every allocation and free
//! the program makes (its own printed counts equal the workload's), and vramtrace must
//! record each of them exactly once.

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;
use vramtrace_tests::harness::{
    check, clean_env, expected_calls, finish, interposer, run_sim, run_within, same, sim_dir,
    static_runtime_names, workload, Outcome,
};

const LAYER: &str = "libvt_sharing_layer.so";

/// The functions the layer hooks (tests/sim/sharing_layer.c).
const HOOKED: &[&str] = &[
    "cuMemAlloc_v2",
    "cuMemAllocManaged",
    "cuMemAllocPitch_v2",
    "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
];

/// The live bytes the layer allows: every allocation of the workloads fits but the one
/// each makes past the card's capacity, which the layer refuses itself.
const LIMIT: &str = "4294967296";

/// Which library is preloaded first.
#[derive(Clone, Copy)]
enum Order {
    VramtraceFirst,
    LayerFirst,
}

fn run(name: &str, order: Order) -> Outcome {
    let layer = sim_dir().join(LAYER);
    let layer = layer.to_str().expect("UTF-8 path");
    match order {
        // `vramtrace run` puts itself before what LD_PRELOAD holds, as a layer from
        // /etc/ld.so.preload also comes after it.
        Order::VramtraceFirst => run_sim(
            name,
            &[],
            &[],
            &[("LD_PRELOAD", layer), ("SHARING_LAYER_LIMIT", LIMIT)],
        ),
        Order::LayerFirst => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let mut cmd = Command::new(workload(name));
            clean_env(&mut cmd)
                .env("LD_PRELOAD", format!("{layer}:{}", interposer().display()))
                .env("LD_LIBRARY_PATH", sim_dir())
                .env("VRAMTRACE_OUTPUT", format!("{}/", dir.path().display()))
                .env("SHARING_LAYER_LIMIT", LIMIT);
            finish(run_within(&mut cmd, Duration::from_secs(600)), dir)
        }
    }
}

/// What the layer printed at exit in the workload's process (`vramtrace run` itself
/// runs with the layer preloaded too).
fn layer_report(run: &Outcome, truth: &Value) -> Value {
    run.printed_all("SHARING_LAYER ")
        .into_iter()
        .find(|r| r["pid"] == truth["pid"])
        .expect("the layer's report from the workload's process")
}

/// The layer's counts of calls to the functions it hooks.
fn layer_counts(report: &Value) -> BTreeMap<String, u64> {
    HOOKED
        .iter()
        .map(|api| (api.to_string(), report[*api].as_u64().expect("a count")))
        .collect()
}

/// The calls of the hooked driver functions the workload made, from its own truth,
/// with runtime calls under the driver function the runtime makes for them.
fn driver_calls(truth: &Value, rename: impl Fn(&str) -> Option<String>) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = HOOKED.iter().map(|a| (a.to_string(), 0)).collect();
    for ((api, _op), c) in expected_calls(truth, rename) {
        if let Some(n) = out.get_mut(&api) {
            *n += c.count;
        }
    }
    out
}

fn driver_workload(order: Order) {
    let run = run("driver_dlsym", order);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("driver-dlsym");
    let report = layer_report(&run, truth);
    assert_eq!(layer_counts(&report), driver_calls(truth, same));
    assert_eq!(
        report["refused"], 1,
        "the layer refused the allocation past its limit"
    );
    match order {
        Order::VramtraceFirst => check(&run, truth, same),
        // The call the layer refused returned from the layer: it never reached vramtrace,
        // behind it, nor the driver. Everything else did, once.
        Order::LayerFirst => {
            let mut reached = truth.clone();
            for c in reached["calls"].as_array_mut().unwrap() {
                if c["api"] == "cuMemAlloc_v2" && c["op"] == "alloc" {
                    c["count"] = (c["count"].as_u64().unwrap() - 1).into();
                    c["failed"] = (c["failed"].as_u64().unwrap() - 1).into();
                }
            }
            check(&run, &reached, same);
        }
    }
}

fn runtime_workload(order: Order) {
    let run = run("runtime_dynamic", order);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("runtime-dynamic");
    check(&run, truth, same);
    // cudaFree(NULL) returns inside the runtime and never reaches the driver.
    let silent = truth["runtime_only_calls"].as_u64().unwrap_or(0);
    let mut expected = driver_calls(truth, static_runtime_names);
    *expected.get_mut("cuMemFree_v2").unwrap() -= silent;
    assert_eq!(layer_counts(&layer_report(&run, truth)), expected);
}

#[test]
fn layer_after_vramtrace_sees_every_driver_call() {
    driver_workload(Order::VramtraceFirst);
}

#[test]
fn layer_before_vramtrace_sees_every_driver_call() {
    driver_workload(Order::LayerFirst);
}

#[test]
fn layer_after_vramtrace_sees_every_runtime_call() {
    runtime_workload(Order::VramtraceFirst);
}

#[test]
fn layer_before_vramtrace_sees_every_runtime_call() {
    runtime_workload(Order::LayerFirst);
}
