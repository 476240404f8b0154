//! CUDA 13's memory pools by location (device, host, host NUMA node, managed) and
//! `cuMemCreate` on the host: the trace says where each allocation lives, device figures
//! hold device memory only, and each other location has its own figures, as the workload
//! counted them itself.

use serde_json::Value;
use std::collections::BTreeMap;
use vramtrace_schema::{Api, Location};
use vramtrace_tests::harness::{check, run_sim, same, static_runtime_names, Trace};

/// `{"host": bytes, ...}` from the truth or from the summary.
fn by_location(truth: &Value, key: &str) -> BTreeMap<String, u64> {
    truth[key]
        .as_object()
        .expect("the workload counted locations")
        .iter()
        .map(|(l, b)| (l.clone(), b.as_u64().unwrap()))
        .collect()
}

/// The summary's figures by location of the run's one process: (peaks, at the end).
fn summary_by_location(summary: &Value) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let (mut peaks, mut at_end) = (BTreeMap::new(), BTreeMap::new());
    for l in summary["processes"][0]["memory_by_location"]
        .as_array()
        .unwrap()
    {
        let name = l["location"].as_str().unwrap().to_string();
        peaks.insert(name.clone(), l["peak_bytes"].as_u64().unwrap());
        at_end.insert(name, l["bytes_at_end"].as_u64().unwrap());
    }
    (peaks, at_end)
}

#[test]
fn host_and_managed_pool_memory_is_reported_by_location_never_as_device_memory() {
    let run = run_sim("mem_locations", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("mem-locations");
    // Every call once, and the device's peak and end as the workload's device bytes: a
    // host or managed byte counted on the device would put them out of range.
    check(&run, truth, same);

    let summary = run.summary();
    let process = &summary["processes"][0];
    let (peaks, at_end) = summary_by_location(&summary);
    assert_eq!(peaks, by_location(truth, "location_peak_bytes"));
    assert_eq!(at_end, by_location(truth, "location_bytes_at_end"));
    // Pinned host memory is every host location together; never the managed pool.
    let host_peak: u64 = ["host", "host_numa", "host_numa_current"]
        .iter()
        .map(|l| peaks[*l])
        .sum();
    assert_eq!(process["peak_pinned_host_bytes"], host_peak);

    // The trace: the location of each allocation from a pool and of each handle.
    let trace = run.trace_for(truth);
    let located: Vec<(Api, Location, Option<u32>)> = trace
        .program_calls()
        .filter(|e| matches!(e.api, Api::CuMemAllocFromPoolAsync | Api::CuMemCreate))
        .map(|e| (e.api, e.loc, e.numa))
        .collect();
    use Location::*;
    let pool = Api::CuMemAllocFromPoolAsync;
    let create = Api::CuMemCreate;
    assert_eq!(
        located,
        [
            (pool, Device, None),
            (pool, Host, None),
            (pool, HostNuma, Some(1)),
            (pool, Managed, None),
            (pool, Managed, None),
            (create, Host, None),
            (create, HostNuma, Some(0)),
            (create, HostNumaCurrent, None),
            (create, Device, None),
        ]
    );

    // Leaks: only device memory counts; the managed pool's and host NUMA bytes left at
    // the end are listed under their own kinds.
    let leaks: Value = serde_json::from_str(&run.view(&["leaks", "--json"])).unwrap();
    assert_eq!(leaks["leaked_bytes"], 0);
    assert_eq!(
        leaks["leaked_pinned_host_bytes"],
        by_location(truth, "location_bytes_at_end")["host_numa"]
    );

    // The HTML report's leaks are the same device leaks: the managed pool's 6 MiB and
    // the host NUMA bytes left at the end are not device memory the program leaked.
    let report = run.dir.path().join("report.html");
    run.view(&["report", "-o", report.to_str().unwrap()]);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("Nothing leaked"),
        "the report's verdict names a leak"
    );
    assert!(
        !html.contains("never freed by processes"),
        "the report lists a leak"
    );

    // The CSV export: a free's kind is its allocation's (frees carry no location).
    let csv = run.view(&["export", "--format", "csv"]);
    let kinds: Vec<(&str, &str)> = csv
        .lines()
        .skip(1)
        .map(|row| row.split(',').collect::<Vec<_>>())
        .filter(|c| c[5] == "free" || c[5] == "release")
        .map(|c| (c[4], c[6]))
        .collect();
    assert_eq!(
        kinds,
        [
            ("cuMemFreeAsync", "host"),
            ("cuMemFreeAsync", "managed_pool"),
            ("cuMemRelease", "host"),
            ("cuMemRelease", "host"),
            ("cuMemFreeAsync", "pool"),
            ("cuMemRelease", "physical"),
        ]
    );

    // The text summary says each location on its own line.
    let text = run.view(&["summary"]);
    for line in [
        "pinned host memory on a host NUMA node: peak 8.0 MiB, 8.0 MiB at the end",
        "managed pool memory (unified memory, not device memory): peak 38.0 MiB, 6.0 MiB at the end",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
}

/// The same through the CUDA 13 runtime: `cudaMemPoolCreate` with a host NUMA location,
/// `cudaMemGetDefaultMemPool` / `cudaMemGetMemPool` for the managed and host pools. The
/// static runtime has no `cuda*` symbols: its calls are seen, located, at the driver.
#[test]
fn runtime_pools_by_location_dynamic_and_static() {
    for (exe, rename) in [
        (
            "runtime_locations_dynamic",
            same as fn(&str) -> Option<String>,
        ),
        ("runtime_locations_static", static_runtime_names),
    ] {
        let run = run_sim(exe, &[], &[], &[]);
        assert!(run.output.status.success(), "{exe}: {}", run.stderr());
        let truth = run.truth("runtime-locations");
        check(&run, truth, rename);
        let (peaks, at_end) = summary_by_location(&run.summary());
        assert_eq!(peaks, by_location(truth, "location_peak_bytes"), "{exe}");
        assert_eq!(at_end, by_location(truth, "location_bytes_at_end"), "{exe}");
    }
}

/// `loc` is read by the fast parser and by the general one alike, and a location this
/// reader does not know (a newer driver's) skips its event, counted as unknown: its bytes
/// are not known to be device memory, so they are in no figure.
#[test]
fn locations_are_read_by_both_parsers_and_unknown_ones_are_skipped() {
    let run = run_sim("mem_locations", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let written = run.trace_for(run.truth("mem-locations"));
    let text = std::fs::read_to_string(&written.path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reread = |name: &str, body: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        Trace::read(&path).unwrap()
    };

    // A space after the key's colon: not the interposer's exact form, so serde reads it.
    let general = reread(
        "general.jsonl",
        text.replace("\"loc\":\"managed\"", "\"loc\": \"managed\""),
    );
    assert_eq!(general.events, written.events);

    let newer = reread(
        "newer.jsonl",
        text.replacen("\"loc\":\"host_numa_current\"", "\"loc\":\"far_away\"", 1),
    );
    assert_eq!(newer.events.len(), written.events.len() - 1);
    assert_eq!(newer.notes.unknown_apis, 1);
    assert!(newer
        .events
        .iter()
        .all(|e| e.loc != Location::HostNumaCurrent));
}

/// Properties and locations are read only once the driver accepted them: calls it rejects
/// before reading their pointers (here, pointers nothing may read) return its answer to
/// the program, recorded as failed calls, and the program goes on.
#[test]
fn properties_the_driver_rejected_unread_are_not_read() {
    let run = run_sim("unread_props", &[], &[], &[]);
    assert!(
        run.output.status.success(),
        "{:?}: {}",
        run.output.status,
        run.stderr()
    );
    check(&run, run.truth("unread-props"), same);
}

/// `cuMemCreate` on a device's locality domain (CUDA 13.4): the location names the device
/// in one byte of its union, not in `id`. The memory is that device's, whatever the
/// union's other bytes hold.
#[test]
fn physical_memory_on_a_locality_domain_is_its_devices() {
    let run = run_sim(
        "locality_domain",
        &[],
        &[],
        &[("VRAMTRACE_SIM_DEVICES", "2")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("locality-domain");
    check(&run, truth, same);
    let trace = run.trace_for(truth);
    let created: Vec<i32> = trace
        .program_calls()
        .filter(|e| e.api == Api::CuMemCreate)
        .map(|e| e.dev)
        .collect();
    assert_eq!(created, [1]);
}

/// A host pool destroyed while another thread makes one that gets the same handle (the
/// driver reuses handles): the new pool's allocations are host memory, whichever thread's
/// hook finishes last.
#[test]
fn a_handle_reused_while_its_pool_is_destroyed_keeps_the_new_pools_location() {
    let run = run_sim("pool_reuse", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("pool-reuse");
    check(&run, truth, same);
    let (peaks, at_end) = summary_by_location(&run.summary());
    assert_eq!(peaks, by_location(truth, "location_peak_bytes"));
    assert_eq!(at_end, by_location(truth, "location_bytes_at_end"));
}

/// A failed allocation from a host pool is a post-mortem of host memory: `oom` says where
/// the memory was asked for and does not judge it by the device's figures.
#[test]
fn a_host_pool_that_cannot_allocate_is_no_device_oom() {
    let run = run_sim("host_pool_oom", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("host-pool-oom"), same);
    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    let failures = oom["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{oom}");
    assert_eq!(failures[0]["location"], "host");
    assert_eq!(failures[0]["verdict"], "not_device_memory");
    let text = run.view(&["oom"]);
    assert!(text.contains("of host memory, not device memory"), "{text}");
    assert_eq!(
        run.summary()["processes"][0]["failures"][0]["location"],
        "host"
    );
    let report = run.dir.path().join("report.html");
    run.view(&["report", "-o", report.to_str().unwrap()]);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("host memory, not the device&#39;s"),
        "the report's verdict"
    );
    let perfetto = run.view(&["export", "--format", "perfetto"]);
    let perfetto: Value = serde_json::from_str(&perfetto).unwrap();
    let failed: Vec<&Value> = perfetto["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["args"]["location"], "host");
}
