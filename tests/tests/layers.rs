//! The layers around "reserved": allocator annotations (allocated), NVML samples (device),
//! and the driver's answer right after a failed allocation.

use serde_json::Value;
use std::collections::HashMap;
use vramtrace_schema::Api;
use vramtrace_tests::harness::{check, run_sim, same, Outcome};

const CONTEXT_BYTES: u64 = 123 << 20;

fn pool_run(env: &[(&str, &str)]) -> Outcome {
    let context = CONTEXT_BYTES.to_string();
    let mut all = vec![
        ("VRAMTRACE_NVML_MS", "20"),
        ("VRAMTRACE_SIM_CONTEXT_BYTES", context.as_str()),
    ];
    all.extend_from_slice(env);
    let run = run_sim("caching_pool", &[], &[], &all);
    assert!(run.output.status.success(), "{}", run.stderr());
    run
}

#[test]
fn allocator_annotations_give_the_allocated_layer() {
    let run = pool_run(&[]);
    check(&run, run.truth("caching-pool"), same);
    let pool = run.printed("VRAMTRACE_POOL ");
    // A deliberately simple replay of the block events, independent of the analyzer.
    let (mut live, mut allocated, mut requested) = (HashMap::new(), 0u64, 0u64);
    let (mut allocated_peak, mut requested_peak) = (0u64, 0u64);
    for e in &run.traces[0].events {
        match e.api {
            Api::VramtraceBlockAlloc => {
                live.insert(e.addr, (e.size, e.requested.unwrap()));
                allocated += e.size;
                requested += e.requested.unwrap();
                allocated_peak = allocated_peak.max(allocated);
                requested_peak = requested_peak.max(requested);
            }
            Api::VramtraceBlockFree => {
                let (size, req) = live.remove(&e.addr).expect("a live block");
                allocated -= size;
                requested -= req;
            }
            _ => {}
        }
    }
    assert_eq!(allocated_peak, pool["allocated_peak"].as_u64().unwrap());
    assert_eq!(requested_peak, pool["requested_peak"].as_u64().unwrap());
    assert_eq!(allocated, pool["allocated_end"].as_u64().unwrap());
    let markers: Vec<&str> = run.traces[0]
        .events
        .iter()
        .filter(|e| e.api == Api::VramtraceMarker)
        .map(|e| run.traces[0].names[&e.handle.unwrap()].as_str())
        .collect();
    assert_eq!(markers, ["model", "step", "pause"]);
}

#[test]
fn device_layer_gap_is_the_context_overhead() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let reserved = pool["reserved_during_pause"].as_u64().unwrap();
    let events = &run.traces[0].events;
    // The workload allocates no segment after its last one, and its "pause" marker comes
    // once NVML was asked after that; it holds still until NVML was asked 6 more times.
    let pause = events
        .iter()
        .find(|e| {
            e.api == Api::VramtraceMarker && run.traces[0].names[&e.handle.unwrap()] == "pause"
        })
        .expect("the pause marker")
        .t;
    let samples: Vec<_> = events
        .iter()
        .filter(|e| e.api == Api::NvmlSample && e.t > pause)
        .collect();
    assert!(
        samples.len() >= 5,
        "NVML sampled during the pause: {}",
        samples.len()
    );
    for s in &samples {
        // While the program holds still, nvidia-smi's figure is what it reserved plus its
        // context.
        assert_eq!(s.size, reserved + CONTEXT_BYTES, "sample at {}", s.t);
        assert_eq!(s.res, 0, "this process is in NVML's list");
        assert_eq!(
            s.total.unwrap() - s.free.unwrap(),
            s.size,
            "one process on the device"
        );
    }
}

/// NVML that fails to start twice (a driver still coming up) is asked again: the
/// device layer is there all the same.
#[test]
fn nvml_that_fails_to_start_at_first_is_asked_again() {
    let run = pool_run(&[("VRAMTRACE_SIM_NVML_INIT_FAILURES", "2")]);
    let samples = run.traces[0]
        .events
        .iter()
        .filter(|e| e.api == Api::NvmlSample && e.res == 0)
        .count();
    assert!(samples >= 5, "{samples} samples");
}

#[test]
fn a_process_nvml_does_not_list_is_said_so() {
    // In a container NVML reports host pids: this process is not found.
    let run = pool_run(&[("VRAMTRACE_SIM_NVML_PID", "1")]);
    let samples: Vec<_> = run.traces[0]
        .events
        .iter()
        .filter(|e| e.api == Api::NvmlSample)
        .collect();
    assert!(!samples.is_empty());
    assert!(
        samples.iter().all(|s| s.res == 1 && s.size == 0),
        "not found, and no invented figure"
    );
}

#[test]
fn no_nvml_samples_unless_the_program_loads_nvml() {
    let run = run_sim("runtime_dynamic", &[], &[], &[("VRAMTRACE_NVML_MS", "10")]);
    check(&run, run.truth("runtime-dynamic"), same);
    assert!(run.traces[0]
        .events
        .iter()
        .all(|e| e.api != Api::NvmlSample));
}

#[test]
fn the_driver_is_asked_what_is_free_right_after_a_failed_allocation() {
    let run = run_sim("runtime_dynamic", &[], &[], &[]);
    let events = &run.traces[0].events;
    let failed = events
        .iter()
        .position(|e| e.res == 2)
        .expect("the failed allocation");
    let probe = &events[failed + 1];
    assert_eq!(probe.api, Api::ProbeMeminfo);
    // The workload asked the same question just before the failed call, and nothing
    // changed in between: the answers agree.
    let truth = run.truth("runtime-dynamic");
    let asked = truth["meminfo"].as_array().unwrap().last().unwrap();
    assert_eq!(probe.free, asked["free"].as_u64());
    assert_eq!(probe.total, asked["total"].as_u64());
}

#[test]
fn summary_reports_the_allocated_and_device_layers() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let summary = run.summary();
    let d = &summary["processes"][0]["devices"][0];
    assert_eq!(d["peak_allocated_bytes"], pool["allocated_peak"]);
    assert_eq!(d["allocated_bytes_at_end"], pool["allocated_end"]);
    let reserved = pool["reserved_during_pause"].as_u64().unwrap();
    assert_eq!(d["reserved_bytes_at_end"].as_u64(), Some(reserved));
    // Cached: reserved but not handed out.
    assert_eq!(
        d["cached_free_bytes_at_end"].as_u64(),
        Some(reserved - pool["allocated_end"].as_u64().unwrap())
    );
    assert_eq!(
        d["peak_device_bytes"].as_u64(),
        Some(reserved + CONTEXT_BYTES)
    );
    // Without annotations or NVML the layers are unknown, not zero.
    let plain = run_sim("runtime_dynamic", &[], &[], &[]);
    let d = &plain.summary()["processes"][0]["devices"][0];
    assert!(d["peak_allocated_bytes"].is_null() && d["peak_device_bytes"].is_null());
}

#[test]
fn any_run_exports_as_a_memory_viz_snapshot() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let path = run.dir.path().join("run.pickle");
    run.view(&[
        "export",
        "--format",
        "memory-viz",
        "-o",
        path.to_str().unwrap(),
    ]);
    // Python's own pickle reads it, as the viewer's loader would.
    let script = r#"
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
segments = s["segments"]
print(json.dumps({
    "reserved": sum(x["total_size"] for x in segments),
    "allocated": sum(b["size"] for x in segments for b in x["blocks"] if b["state"] == "active_allocated"),
    "covered": all(sum(b["size"] for b in x["blocks"]) == x["total_size"] for x in segments),
    "actions": sorted({e["action"] for t in s["device_traces"] for e in t}),
    "functions": sorted({f["name"] for x in segments for f in x["frames"]}),
    # Its history's tensors: what its allocs less its frees leave.
    "history_allocated": sum(e["size"] * {"alloc": 1, "free_completed": -1}.get(e["action"], 0)
                             for t in s["device_traces"] for e in t),
}))
"#;
    let got = python_json(script, &[&path]);
    assert_eq!(got["reserved"], pool["reserved_during_pause"]);
    assert_eq!(got["allocated"], pool["allocated_end"]);
    assert_eq!(got["covered"], true, "blocks tile each segment");
    // No segment written as a tensor too: the first is reserved before a block is annotated.
    assert_eq!(got["history_allocated"], pool["allocated_end"]);
    assert_eq!(
        got["actions"],
        serde_json::json!(["alloc", "free_completed", "free_requested", "segment_alloc"])
    );
    assert!(
        got["functions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "find_or_carve"),
        "{got}"
    );
}

#[test]
fn oom_with_a_fragmented_cache_says_so() {
    // Room for three 20 MiB segments beside the 300 MiB context, not a fourth.
    let run = run_sim(
        "caching_pool",
        &["fragment"],
        &["--sim-capacity", "370MiB"],
        &[],
    );
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let frag = run.printed("VRAMTRACE_FRAGMENTED ");
    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    let f = &oom["failures"][0];
    assert_eq!(f["verdict"], "fragmentation", "{f}");
    assert_eq!(f["allocator"]["cached_free_bytes"], frag["cached_free"]);
    assert_eq!(
        f["allocator"]["largest_free_block_bytes"],
        frag["largest_free"]
    );
    assert_eq!(f["allocator"]["free_blocks"], frag["free_blocks"]);
    assert!(f["advice"].to_string().contains("expandable_segments"));
}

#[test]
fn timeline_shows_device_reserved_and_allocated_together() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let timeline: Value = serde_json::from_str(&run.view(&["timeline", "--json"])).unwrap();
    let series = |layer: &str| -> (u64, u64) {
        let s = timeline["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["scope"] == "process" && s["layer"] == layer)
            .unwrap_or_else(|| panic!("a {layer} series"));
        let points = s["points"].as_array().unwrap();
        let max = points
            .iter()
            .map(|p| p["max_bytes"].as_u64().unwrap())
            .max()
            .unwrap();
        (max, points.last().unwrap()["live_bytes"].as_u64().unwrap())
    };
    let reserved = pool["reserved_during_pause"].as_u64().unwrap();
    let allocated_end = pool["allocated_end"].as_u64().unwrap();
    assert_eq!(series("reserved"), (reserved, reserved));
    assert_eq!(
        series("allocated"),
        (pool["allocated_peak"].as_u64().unwrap(), allocated_end)
    );
    assert_eq!(series("cached_free").1, reserved - allocated_end);
    assert_eq!(series("device").0, reserved + CONTEXT_BYTES);
}

/// The points of the timeline's one series of tensors, which must be the `allocated`
/// series of process `pid` (a second series of the same tensors would fail here), and its
/// most bytes.
fn tensor_series(timeline: &Value, pid: u32) -> (&Vec<Value>, Option<u64>) {
    let tensors: Vec<&Value> = timeline["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["layer"].as_str().unwrap().contains("allocated"))
        .collect();
    assert_eq!(tensors.len(), 1, "one series of tensors: {timeline}");
    assert_eq!(tensors[0]["layer"], "allocated");
    assert_eq!(tensors[0]["pid"].as_u64(), Some(pid as u64));
    let points = tensors[0]["points"].as_array().unwrap();
    let most = points
        .iter()
        .map(|p| p["max_bytes"].as_u64().unwrap())
        .max();
    (points, most)
}

#[test]
fn a_pytorch_snapshot_beside_an_annotating_process_is_not_counted_twice() {
    let run = pool_run(&[]);
    let header = &run.traces[0].header;
    // PyTorch's history, as its hook would dump it beside the trace: 4 MiB and 6 MiB
    // allocated 10 and 20 ms into the run, the 4 MiB freed at 30 ms.
    let script = r#"
import pickle, sys
M = 1 << 20
start_us = int(sys.argv[2]) // 1000
def entry(action, addr, size, ms):
    return {"action": action, "addr": addr, "size": size, "stream": 0,
            "time_us": start_us + ms * 1000, "frames": []}
trace = [entry("alloc", 1 << 40, 4 * M, 10), entry("alloc", (1 << 40) + 4 * M, 6 * M, 20),
         entry("free_requested", 1 << 40, 4 * M, 30), entry("free_completed", 1 << 40, 4 * M, 30)]
segment = {"device": 0, "address": 1 << 40, "total_size": 20 * M, "stream": 0,
           "segment_type": "large", "frames": [],
           "blocks": [{"address": 1 << 40, "size": 4 * M, "requested_size": 0, "state": "inactive"},
                      {"address": (1 << 40) + 4 * M, "size": 6 * M, "requested_size": 6 * M,
                       "state": "active_allocated"},
                      {"address": (1 << 40) + 10 * M, "size": 10 * M, "requested_size": 0,
                       "state": "inactive"}]}
pickle.dump({"segments": [segment], "device_traces": [trace]}, open(sys.argv[1], "wb"), protocol=4)
"#;
    run.write_hook_snapshot(script);
    let out = std::process::Command::new(vramtrace_tests::harness::vramtrace())
        .args(["timeline", "--json", "--resolution", "5ms"])
        .arg(run.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let timeline: Value = serde_json::from_slice(&out.stdout).unwrap();
    // This process's allocator annotates its own blocks, from its first milliseconds: its
    // one series of tensors is the pool's, as it printed them, and the snapshot's tensors
    // (joining no more) are neither drawn beside them nor added to them; a note says so.
    let (points, most) = tensor_series(&timeline, header.pid);
    let pool = run.printed("VRAMTRACE_POOL ");
    assert_eq!(most, pool["allocated_peak"].as_u64(), "{timeline}");
    assert_eq!(
        points.last().unwrap()["live_bytes"],
        pool["allocated_end"],
        "{timeline}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(
            "its allocator annotates its own blocks: the tensors of its PyTorch snapshot leave the allocated layer"
        ),
        "{said}"
    );
    // Nor do they join its other views (its 6 MiB never freed would show as a leak).
    let leaks: Value = serde_json::from_str(&run.view(&["leaks", "--json"])).unwrap();
    assert_eq!(leaks["leaked_tensor_bytes"], pool["requested_end"]);
    let peak: Value = serde_json::from_str(&run.view(&["peak", "--json"])).unwrap();
    assert_eq!(peak["devices"][0]["live_bytes"], pool["requested_peak"]);
}

#[test]
fn timeline_shows_internal_and_external_fragmentation() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let timeline: Value = serde_json::from_str(&run.view(&["timeline", "--json"])).unwrap();
    let end = |layer: &str| -> u64 {
        let s = timeline["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["layer"] == layer)
            .unwrap_or_else(|| panic!("a {layer} series"));
        s["points"].as_array().unwrap().last().unwrap()["live_bytes"]
            .as_u64()
            .unwrap()
    };
    let u = |k: &str| pool[k].as_u64().unwrap();
    // Internal: rounding inside handed-out blocks; external: the largest gap between them.
    assert_eq!(
        end("internal_free"),
        u("allocated_end") - u("requested_end")
    );
    assert_eq!(end("largest_free_block"), u("largest_free_end"));
    assert_eq!(end("free_blocks"), u("free_blocks_end"));
    let summary = run.summary();
    assert_eq!(
        summary["processes"][0]["devices"][0]["largest_free_block_bytes_at_end"].as_u64(),
        Some(u("largest_free_end"))
    );
}

/// The caching pool's `peak` lists the blocks it handed out, not its two segments: those
/// live at its requested peak, grouped by the stack of the annotation call, each group at
/// the source line that asked for it, as the workload counted them itself.
#[test]
fn peak_lists_the_annotated_blocks_by_the_line_that_asked() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let truth = run.printed("VRAMTRACE_POOL_PEAK ");
    let sites = truth["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 2, "weights and activations: {truth}");
    let peak: Value = serde_json::from_str(&run.view(&["peak", "--json"])).unwrap();
    let d = &peak["devices"][0];
    assert_eq!(d["layer"], "allocated");
    assert_eq!(d["live_bytes"], pool["requested_peak"]);
    let groups = d["groups"].as_array().unwrap();
    assert_eq!(groups.len(), sites.len(), "{d}");
    for site in sites {
        let asked_here = |g: &&Value| {
            g["frames"].as_array().is_some_and(|frames| {
                frames.iter().any(|f| {
                    f["function"] == "main"
                        && f["line"] == site["line"]
                        && f["file"]
                            .as_str()
                            .is_some_and(|p| p.ends_with("caching_pool.c"))
                })
            })
        };
        let g = groups
            .iter()
            .find(asked_here)
            .unwrap_or_else(|| panic!("no group asked from line {}: {d}", site["line"]));
        assert_eq!(g["api"], "vramtrace_block_alloc");
        assert_eq!(
            (&g["blocks"], &g["bytes"]),
            (&site["blocks"], &site["requested"])
        );
        // The annotation helper of vramtrace.h is machinery, not who asked.
        assert!(
            g["frames"][0]["function"] != "vramtrace_block_alloc_hint",
            "{g}"
        );
    }
    // The reserved layer is still there for the asking: the two 20 MiB segments.
    let reserved: Value =
        serde_json::from_str(&run.view(&["peak", "--json", "--layer", "reserved"])).unwrap();
    let d = &reserved["devices"][0];
    assert_eq!(d["layer"], "reserved");
    assert_eq!(
        (d["live_bytes"].as_u64(), d["live_blocks"].as_u64()),
        (Some(40 << 20), Some(2))
    );
}

/// `leaks` lists, beside the segments a caching allocator keeps anyway, the blocks it
/// handed out and never got back: the workload's own count of requested bytes at its
/// end, all from the line that allocated the weights.
#[test]
fn leaks_lists_the_blocks_never_given_back() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let truth = run.printed("VRAMTRACE_POOL_PEAK ");
    let weights = truth["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["blocks"] == 8)
        .expect("the weights' site");
    let leaks: Value = serde_json::from_str(&run.view(&["leaks", "--json"])).unwrap();
    assert_eq!(leaks["leaked_tensor_bytes"], pool["requested_end"]);
    let groups = leaks["tensor_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{leaks}");
    assert_eq!(groups[0]["bytes"], pool["requested_end"]);
    let frames = groups[0]["frames"].as_array().unwrap();
    assert!(
        frames
            .iter()
            .any(|f| f["function"] == "main" && f["line"] == weights["line"]),
        "{frames:?}"
    );
}

/// What a Python script (`python -c SCRIPT ARGS...`, which must succeed) prints, as JSON:
/// the tests' own reading of a file, as Python's `pickle` reads it, or their own replay.
fn python_json<A: AsRef<std::ffi::OsStr>>(script: &str, args: &[A]) -> Value {
    let py = std::process::Command::new(vramtrace_tests::harness::python())
        .args(["-c", script])
        .args(args)
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    serde_json::from_slice(&py.stdout).unwrap()
}

/// The sum of the byte counts of folded-stack lines (`frame;frame;... bytes`).
fn folded_bytes(folded: &str) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

/// Every view that lists memory answers at the allocated layer where an allocator tells
/// its blocks, at the reserved layer with `--layer reserved`, and says which: checked
/// against the caching pool's own bookkeeping (its segments only grow, so the reserved
/// peak and end are what it held during its pause).
#[test]
fn every_view_answers_at_the_layer_asked() {
    let run = pool_run(&[]);
    let pool = run.printed("VRAMTRACE_POOL ");
    let reserved = pool["reserved_during_pause"].as_u64().unwrap();
    let json = |args: &[&str]| -> Value { serde_json::from_str(&run.view(args)).unwrap() };

    // flamegraph: the tensors at their peak, or the segments.
    let tensors = run.view(&["flamegraph", "--folded"]);
    assert_eq!(
        Some(folded_bytes(&tensors)),
        pool["requested_peak"].as_u64()
    );
    assert!(tensors.contains("vramtrace_block_alloc"), "{tensors}");
    let segments = run.view(&["flamegraph", "--folded", "--layer", "reserved"]);
    assert_eq!(folded_bytes(&segments), reserved);
    assert!(!segments.contains("vramtrace_block_alloc"), "{segments}");
    let never_freed = run.view(&["flamegraph", "--folded", "--leaks"]);
    assert_eq!(
        Some(folded_bytes(&never_freed)),
        pool["requested_end"].as_u64()
    );
    let held = run.view(&["flamegraph", "--folded", "--leaks", "--layer", "reserved"]);
    assert_eq!(folded_bytes(&held), reserved);

    // leaks: which layer it answers at, and the text lists that one alone when asked.
    let leaks = json(&["leaks", "--json"]);
    assert_eq!(leaks["layer"], "allocated");
    assert_eq!(leaks["leaked_tensor_bytes"], pool["requested_end"]);
    assert_eq!(
        json(&["leaks", "--json", "--layer", "reserved"])["layer"],
        "reserved"
    );
    assert_eq!(leaks["leaked_bytes"].as_u64(), Some(reserved));
    let text = run.view(&["leaks"]);
    let (tensors_at, segments_at) = (
        text.find("allocated layer").expect("tensors listed"),
        text.find("reserved layer").expect("segments listed"),
    );
    assert!(tensors_at < segments_at, "tensors first: {text}");
    let text = run.view(&["leaks", "--layer", "reserved"]);
    assert!(!text.contains("allocated layer"), "{text}");

    // summary: the groups at each GPU's peak are tensors, or segments when asked.
    let summary = json(&["summary", "--json"]);
    assert_eq!(summary["devices"][0]["layer"], "allocated");
    let summary = json(&["summary", "--json", "--layer", "reserved"]);
    assert_eq!(summary["devices"][0]["layer"], "reserved");
    let text = run.view(&["summary"]);
    assert!(text.contains("reserved at"), "{text}");
    assert!(text.contains("tensors (allocated layer): peak "), "{text}");

    // timeline: one layer's series only.
    for (layer, names) in [
        ("allocated", &["allocated"][..]),
        ("reserved", &["reserved"][..]),
    ] {
        let t = json(&["timeline", "--json", "--layer", layer]);
        let series = t["series"].as_array().unwrap();
        assert!(!series.is_empty());
        assert!(
            series
                .iter()
                .all(|s| names.contains(&s["layer"].as_str().unwrap())),
            "{layer}: {t}"
        );
    }

    // export --format memory-viz: tensors inside the segments, or one block per segment.
    let path = run.dir.path().join("reserved.pickle");
    run.view(&[
        "export",
        "--format",
        "memory-viz",
        "--layer",
        "reserved",
        "-o",
        path.to_str().unwrap(),
    ]);
    let script = r#"
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
print(json.dumps(sorted({len([b for b in x["blocks"] if b["state"] == "active_allocated"]) for x in s["segments"]})))
"#;
    let per_segment = python_json(script, &[&path]);
    assert_eq!(per_segment, serde_json::json!([1]), "one block per segment");
}

/// `oom` lists the live tensors at a failure first, and only the reserved layer when asked.
#[test]
fn oom_answers_at_the_layer_asked() {
    let run = run_sim(
        "caching_pool",
        &["fragment"],
        &["--sim-capacity", "370MiB"],
        &[],
    );
    let text = run.view(&["oom"]);
    let tensors_at = text.find("(allocated layer)").expect("tensors listed");
    let segments_at = text.find("(reserved layer)").expect("segments listed");
    assert!(tensors_at < segments_at, "{text}");
    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    assert_eq!(oom["failures"][0]["layer"], "allocated");
    let text = run.view(&["oom", "--layer", "reserved"]);
    assert!(!text.contains("(allocated layer)"), "{text}");
    let oom: Value =
        serde_json::from_str(&run.view(&["oom", "--json", "--layer", "reserved"])).unwrap();
    assert_eq!(oom["failures"][0]["layer"], "reserved");
}

/// The PyTorch hook's snapshot beside a traced run joins the process that wrote it: the
/// demo's trace, and a history (as PyTorch would record it) with one tensor from a line of
/// train.py in each of the demo's segments, allocated with it and freed with it. `peak`
/// on the run directory gives the tensors by Python call site and `oom` those alive at
/// the demo's failure, as a replay of the pickle in Python says; the reserved layer stays
/// the trace's.
#[test]
fn a_hook_snapshot_joins_the_traced_process() {
    let run = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let trace = &run.traces[0];
    let failed_at = trace
        .events
        .iter()
        .find(|e| e.api == Api::CudaMalloc && e.res != 0)
        .expect("the demo runs out of memory")
        .t;
    // [address, size, allocated at, freed at or null] (ns since the trace's start).
    let mut segments: Vec<Value> = Vec::new();
    for e in &trace.events {
        match e.api {
            Api::CudaMalloc if e.res == 0 => {
                segments.push(serde_json::json!([e.addr, e.size, e.t, null]));
            }
            Api::CudaFree if e.res == 0 => {
                if let Some(s) = segments
                    .iter_mut()
                    .find(|s| s[0] == e.addr && s[3].is_null())
                {
                    s[3] = e.t.into();
                }
            }
            _ => {}
        }
    }
    let script = r#"
import json, pickle, sys
path, start_ns, failed_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
segments = json.loads(sys.argv[4])
def us(t):
    return (start_ns + t) // 1000
trace, final = [], []
for k, (addr, size, t, freed) in enumerate(segments):
    line = 100 + k % 3
    frames = [{"filename": "/home/me/train.py", "line": line, "name": "layer%d" % (k % 3)}]
    entry = lambda action, when, n: {"action": action, "addr": addr, "size": n, "stream": 0,
                                     "time_us": us(when), "frames": frames}
    trace += [entry("segment_alloc", t, size), entry("alloc", t, size // 2)]
    if freed is None:
        final.append({"device": 0, "address": addr, "total_size": size, "stream": 0,
                      "segment_type": "large", "frames": [],
                      "blocks": [{"address": addr, "size": size // 2, "requested_size": size // 2,
                                  "state": "active_allocated", "frames": frames},
                                 {"address": addr + size // 2, "size": size - size // 2,
                                  "requested_size": 0, "state": "inactive", "frames": []}]})
    else:
        trace += [entry("free_requested", freed, size // 2), entry("free_completed", freed, size // 2),
                  entry("segment_free", freed, size)]
trace.sort(key=lambda e: e["time_us"])
pickle.dump({"segments": final, "device_traces": [trace]}, open(path, "wb"), protocol=4)

# The replay: tensors by function, at their peak and at the failure (on the trace's clock,
# to the microsecond the history keeps).
snap = pickle.load(open(path, "rb"))
# The allocator hands out blocks in multiples of 512 bytes: the timeline's allocated
# layer counts blocks, peak's counts the tensors' requested bytes.
alive, peak, at_peak, at_failure, blocks, peak_blocks = {}, 0, {}, None, 0, 0
def by_function():
    by = {}
    for size, name in alive.values():
        by[name] = by.get(name, 0) + size
    return by
for e in snap["device_traces"][0]:
    if at_failure is None and e["time_us"] * 1000 - start_ns > failed_at:
        at_failure = by_function()
    if e["action"] == "alloc":
        alive[e["addr"]] = (e["size"], e["frames"][0]["name"])
        blocks += -(-e["size"] // 512) * 512
    elif e["action"] == "free_completed":
        blocks -= -(-alive.pop(e["addr"])[0] // 512) * 512
    peak_blocks = max(peak_blocks, blocks)
    live = sum(s for s, _ in alive.values())
    if live > peak:
        peak, at_peak = live, by_function()
if at_failure is None:
    at_failure = by_function()
top = max(at_peak.items(), key=lambda kv: kv[1])
print(json.dumps({"peak": peak, "peak_blocks": peak_blocks, "function": top[0], "function_bytes": top[1],
                  "at_failure": at_failure}))
"#;
    let pickle = run.dir.path().join(format!(
        "torch-snapshot-{}-{}.pickle",
        trace.header.host, trace.header.pid
    ));
    let truth = python_json(
        script,
        &[
            pickle.into_os_string(),
            trace.header.start_unix_ns.to_string().into(),
            failed_at.to_string().into(),
            Value::Array(segments).to_string().into(),
        ],
    );

    let peak: Value = serde_json::from_str(&run.view(&["peak", "--json"])).unwrap();
    let d = &peak["devices"][0];
    assert_eq!(d["layer"], "allocated", "{d}");
    assert_eq!(d["live_bytes"], truth["peak"], "{d}");
    assert_eq!(d["top_function"]["function"], truth["function"], "{d}");
    assert_eq!(d["top_function"]["file"], "/home/me/train.py", "{d}");
    assert_eq!(d["top_function"]["bytes"], truth["function_bytes"], "{d}");
    let reserved: Value =
        serde_json::from_str(&run.view(&["peak", "--json", "--layer", "reserved"])).unwrap();
    assert_eq!(
        reserved["devices"][0]["live_bytes"],
        run.truth("demo")["peak_live_bytes"]["0"]
    );

    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    let f = &oom["failures"][0];
    let mut by = serde_json::Map::new();
    for g in f["tensor_groups"].as_array().unwrap() {
        let name = g["frames"][0]["function"].as_str().unwrap().to_string();
        let sum = by.get(&name).and_then(Value::as_u64).unwrap_or(0) + g["bytes"].as_u64().unwrap();
        by.insert(name, sum.into());
    }
    assert!(!by.is_empty(), "tensors were alive at the failure: {f}");
    assert_eq!(Value::Object(by), truth["at_failure"], "{f}");

    // timeline: the tensors' blocks are the process's one allocated series, counted once
    // (not a second series beside it, nor summed into it), whose most is the replay's.
    let timeline: Value = serde_json::from_str(&run.view(&["timeline", "--json"])).unwrap();
    let (_, most) = tensor_series(&timeline, trace.header.pid);
    assert_eq!(most, truth["peak_blocks"].as_u64(), "{timeline}");
    // A pack of the run gives the same timeline: its snapshot joins the same way.
    let out = tempfile::tempdir().unwrap();
    let pack = out.path().join("run.vtpack");
    let packed = std::process::Command::new(vramtrace_tests::harness::vramtrace())
        .args(["pack", "-o"])
        .arg(&pack)
        .arg(run.dir.path())
        .output()
        .unwrap();
    assert!(packed.status.success(), "{packed:?}");
    let from_pack = std::process::Command::new(vramtrace_tests::harness::vramtrace())
        .args(["timeline", "--json"])
        .arg(&pack)
        .output()
        .unwrap();
    assert!(from_pack.status.success(), "{from_pack:?}");
    let from_pack: Value = serde_json::from_slice(&from_pack.stdout).unwrap();
    assert_eq!(from_pack, timeline);

    // The history's clock is the trace's (to the microsecond): the segments both saw
    // agree, so nothing is said about it.
    let out = std::process::Command::new(vramtrace_tests::harness::vramtrace())
        .arg("summary")
        .arg(run.dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    // A summary that failed says nothing of clocks either: it must have read the run.
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("its clock is"), "{said}");
}
