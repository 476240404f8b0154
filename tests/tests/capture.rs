//! Every workload run under `vramtrace run --sim`: its traces decoded and compared with the
//! ground truth the workload printed itself.

use vramtrace_tests::harness::{check, run_sim, same, static_runtime_names};

/// The runtime workloads, built against the CUDA 12 and the CUDA 13 runtime.
const CUDA_MAJORS: &[&str] = &["", "_13"];

#[test]
fn dynamic_runtime_calls_are_recorded_once_under_runtime_names() {
    for suffix in CUDA_MAJORS {
        dynamic_runtime(&format!("runtime_dynamic{suffix}"));
    }
}

fn dynamic_runtime(exe: &str) {
    let run = run_sim(exe, &[], &[], &[]);
    assert!(run.output.status.success(), "{exe}: {}", run.stderr());
    assert_eq!(run.traces.len(), 1);
    check(&run, run.truth("runtime-dynamic"), same);
    // The failed allocation reached the trace with its request and the driver's code.
    let failed: Vec<_> = run.traces[0].events.iter().filter(|e| e.res == 2).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].api.name(), "cudaMalloc");
}

#[test]
fn static_runtime_is_seen_at_the_driver() {
    for suffix in CUDA_MAJORS {
        static_runtime(&format!("runtime_static{suffix}"));
    }
}

fn static_runtime(exe: &str) {
    let run = run_sim(exe, &[], &[], &[]);
    assert!(run.output.status.success(), "{exe}: {}", run.stderr());
    let truth = run.truth("runtime-static");
    // cudaFree(NULL) returns inside the runtime and never reaches the driver.
    // The sim's runtime, like NVIDIA's, pins host memory with cuMemHostAlloc.
    let silent = truth["runtime_only_calls"].as_u64().unwrap_or(0);
    let mut truth = truth.clone();
    for c in truth["calls"].as_array_mut().unwrap() {
        if c["api"] == "cudaFree" {
            c["count"] = (c["count"].as_u64().unwrap() - silent).into();
        }
    }
    let run_truth = truth;
    check(&run, &run_truth, static_runtime_names);
    assert!(run.traces[0].events.iter().all(|e| !e.api.is_runtime()));
}

#[test]
fn driver_functions_looked_up_with_dlsym_and_get_proc_address() {
    let run = run_sim("driver_dlsym", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("driver-dlsym"), same);
}

#[test]
fn program_linked_with_libcuda() {
    let run = run_sim("driver_linked", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("driver-linked"), same);
}

#[test]
fn cudarc_with_memory_pools() {
    let run = run_sim("cudarc_workload", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("cudarc");
    assert_eq!(truth["pools"], true);
    check(&run, truth, same);
}

#[test]
fn cudarc_without_memory_pools() {
    let run = run_sim(
        "cudarc_workload",
        &[],
        &[],
        &[("VRAMTRACE_SIM_MEMORY_POOLS", "0")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("cudarc");
    assert_eq!(truth["pools"], false);
    check(&run, truth, same);
}

#[test]
fn expandable_segments_count_physical_memory_until_release_and_unmap() {
    let run = run_sim("expandable", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("expandable"), same);
}

#[test]
fn sixteen_threads_every_call_exactly_once() {
    let run = run_sim("threads", &["16", "100000"], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("threads");
    assert_eq!(truth["threads"], 16);
    check(&run, truth, same);
}

/// 64 threads make their first allocation at once, eight times over: each event must
/// still name device 0, which every thread set. A hook that looks up the driver's
/// cuCtxGetDevice on first use gave the threads that came while another was looking it
/// up no device at all (half of such runs, before the fix).
#[test]
fn threads_starting_together_all_name_their_device() {
    for _ in 0..8 {
        let run = run_sim("threads", &["64", "2"], &[], &[]);
        assert!(run.output.status.success(), "{}", run.stderr());
        let truth = run.truth("threads");
        assert_eq!(truth["threads"], 64);
        check(&run, truth, same);
    }
}

#[test]
fn fork_and_exec_children_write_their_own_traces() {
    let run = run_sim("fork_exec", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.truths.len(), 3, "parent, forked child, exec'd child");
    assert_eq!(run.traces.len(), 3, "one trace per process image");
    check(&run, run.truth("fork-parent"), same);
    check(&run, run.truth("fork-child"), same);
    check(&run, run.truth("runtime-dynamic"), same);
    let parent = run.truth("fork-parent")["pid"].as_u64().unwrap() as u32;
    for child in ["fork-child", "runtime-dynamic"] {
        assert_eq!(
            run.trace_for(run.truth(child)).header.ppid,
            parent,
            "{child}'s parent"
        );
    }
}

#[test]
fn child_tracing_off_traces_only_the_parent() {
    let run = run_sim("fork_exec", &[], &["--no-children"], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.traces.len(), 1);
    check(&run, run.truth("fork-parent"), same);
}

#[test]
fn demo_runs_out_of_memory_like_a_training_job() {
    let run = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    assert_eq!(
        run.output.status.code(),
        Some(1),
        "the demo exits with the CUDA error"
    );
    assert!(
        run.stderr().contains("CUDA out of memory"),
        "{}",
        run.stderr()
    );
    let truth = run.truth("demo");
    check(&run, truth, same);
    let failed = run.traces[0].events.iter().filter(|e| e.res != 0).count() as u64;
    let expected: u64 = truth["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["failed"].as_u64().unwrap())
        .sum();
    assert_eq!(failed, expected);
    assert!(failed >= 1);
}
