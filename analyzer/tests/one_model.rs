//! One allocator model behind every view: for each real snapshot with a history and each
//! setting of a small matrix, `whatif -o` writes the replayed run as a snapshot, and
//! `summary`, `peak`, `timeline` and `oom` of that file give whatif's own figures (peak
//! and end, reserved and allocated, and the failures). The end figures are also worked
//! out by Python's own `pickle` from the file's segments and blocks.

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;

const SETTINGS: [Option<&str>; 5] = [
    None,
    Some("expandable_segments:True"),
    Some("max_split_size_mb:128"),
    Some("roundup_power2_divisions:4"),
    Some("garbage_collection_threshold:0.6"),
];

/// Per device of a snapshot, by Python's `pickle`: [device, reserved (the segments'
/// `total_size`), allocated (the `size` of `active_allocated` blocks)].
const END_BY_PICKLE: &str = r#"
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
out = {}
for seg in s["segments"]:
    d = out.setdefault(seg["device"], [seg["device"], 0, 0])
    d[1] += seg["total_size"]
    d[2] += sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
print(json.dumps(sorted(out.values())))
"#;

fn json(args: &[&str]) -> Value {
    let out = common::vramtrace_ok(args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The most any point of the `layer` series of `device` reaches.
fn series_max(timeline: &Value, device: u64, layer: &str) -> Option<u64> {
    timeline["series"]
        .as_array()?
        .iter()
        .filter(|s| s["layer"] == layer && s["device"] == device && s["scope"] != "run")
        .flat_map(|s| s["points"].as_array().unwrap())
        .filter_map(|p| p["max_bytes"].as_u64())
        .max()
}

/// Checks the views of the snapshot whatif wrote for `file` under `set`; a failure
/// message otherwise.
fn check(file: &Path, set: Option<&str>, out: &Path) -> Result<(), String> {
    let name = format!(
        "{} under {}",
        file.file_name().unwrap().to_string_lossy(),
        set.unwrap_or("the recorded settings")
    );
    let written = out.to_str().unwrap();
    let mut args = vec!["whatif", "--json", "--no-search", "-o", written];
    if let Some(s) = set {
        args.extend(["--set", s]);
    }
    args.push(file.to_str().unwrap());
    let whatif = json(&args);
    let summary = json(&["summary", "--json", written]);
    let peak = json(&["peak", "--json", "--layer", "reserved", written]);
    let timeline = json(&["timeline", "--json", written]);
    let oom = json(&["oom", "--json", written]);
    let by_pickle = common::python_list(END_BY_PICKLE, &[out]);
    let devices: Vec<&Value> = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["devices"].as_array().unwrap())
        .collect();
    let mut failures = 0;
    for d in whatif["devices"].as_array().unwrap() {
        let dev = d["device"].as_u64().unwrap();
        let sc = d["scenarios"].as_array().unwrap().last().unwrap();
        failures += sc["failures"].as_array().unwrap().len();
        let Some(s) = devices.iter().find(|x| x["device"] == dev) else {
            return Err(format!("{name}: device {dev} not in summary: {summary}"));
        };
        let pairs = [
            (
                "summary peak reserved",
                &s["peak_reserved_bytes"],
                &sc["peak_reserved_bytes"],
            ),
            (
                "summary peak allocated",
                &s["peak_allocated_bytes"],
                &sc["peak_allocated_bytes"],
            ),
            (
                "summary end reserved",
                &s["reserved_bytes_at_end"],
                &sc["end_reserved_bytes"],
            ),
            (
                "summary end allocated",
                &s["allocated_bytes_at_end"],
                &sc["end_allocated_bytes"],
            ),
        ];
        for (what, got, want) in pairs {
            if got != want {
                return Err(format!("{name}: device {dev}: {what} {got}, whatif {want}"));
            }
        }
        let gpu = dev.to_string();
        let peak_dev = peak["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["gpu"] == *gpu);
        let peak_live = peak_dev.map(|x| &x["live_bytes"]);
        if peak_live != Some(&sc["peak_reserved_bytes"]) {
            return Err(format!(
                "{name}: device {dev}: peak --layer reserved {peak_live:?}, whatif {}",
                sc["peak_reserved_bytes"]
            ));
        }
        for (layer, key) in [
            ("reserved", "peak_reserved_bytes"),
            ("allocated", "peak_allocated_bytes"),
        ] {
            let most = series_max(&timeline, dev, layer);
            if most != sc[key].as_u64() {
                return Err(format!(
                    "{name}: device {dev}: timeline {layer} at most {most:?}, whatif {}",
                    sc[key]
                ));
            }
        }
        let python = by_pickle.iter().find(|x| x[0] == dev);
        let want = Some(vec![
            dev.into(),
            sc["end_reserved_bytes"].clone(),
            sc["end_allocated_bytes"].clone(),
        ]);
        if python.and_then(Value::as_array).cloned() != want {
            return Err(format!("{name}: device {dev}: Python's pickle reads the end as {python:?}, whatif {want:?}"));
        }
    }
    let ooms = oom["failures"].as_array().unwrap().len();
    if ooms != failures {
        return Err(format!(
            "{name}: oom lists {ooms} failures, whatif {failures}"
        ));
    }
    Ok(())
}

#[test]
fn every_view_of_a_replayed_snapshot_gives_whatifs_figures() {
    let Some(files) = vramtrace_tests::fixtures::snapshots() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // Only the files with allocations in their history can be replayed (whatif says so
    // of the others); every one of those is checked.
    let replayable: Vec<&PathBuf> = files
        .iter()
        .filter(|f| {
            common::vramtrace(&["whatif", "--json", "--no-search", f.to_str().unwrap()])
                .status
                .success()
        })
        .collect();
    assert_eq!(
        replayable.len(),
        8,
        "the fixtures with a history: {replayable:?}"
    );
    let jobs: Vec<(usize, &PathBuf, Option<&str>)> = replayable
        .iter()
        .flat_map(|f| SETTINGS.iter().map(move |s| (*f, *s)))
        .enumerate()
        .map(|(i, (f, s))| (i, f, s))
        .collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let errors: Vec<String> = std::thread::scope(|scope| {
        let chunks: Vec<_> = jobs.chunks(jobs.len().div_ceil(threads)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let tmp = tmp.path();
                scope.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|&(i, f, s)| {
                            check(f, s, &tmp.join(format!("{i}.pickle"))).err()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// Of a snapshot: [all segments expandable? (bool), segments' total_size, the settings'
/// expandable_segments, [[size, device_free] of each `oom` entry]], by Python's `pickle`.
const EXPANDABLE_BY_PICKLE: &str = r#"
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
segs = s["segments"]
ooms = [[e["size"], e["device_free"]] for t in s["device_traces"] for e in t if e["action"] == "oom"]
print(json.dumps([sum(x["is_expandable"] for x in segs), sum(x["total_size"] for x in segs),
                  s["allocator_settings"]["expandable_segments"], ooms]))
"#;

/// A run with expandable segments that ran out on a smaller card (`whatif --capacity -o`):
/// its post-mortem speaks of mapped pages, names the unmapped address space apart, and
/// never proposes expandable segments, which were on; the driver's free bytes at the
/// failure are the card's capacity less the segments' mapped size, as Python reads them.
#[test]
fn an_expandable_run_that_ran_out_is_not_told_to_turn_expandable_segments_on() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    let file = dir.join("kkaitlyn111_memory_ctx512_forward_mixed.pickle");
    let file = file.to_str().unwrap();
    let set = "expandable_segments:True";
    let free = json(&["whatif", "--json", "--no-search", "--set", set, file]);
    let peak = free["devices"][0]["scenarios"][0]["peak_reserved_bytes"]
        .as_u64()
        .unwrap();
    // A card 10% smaller than what the run reserved with expandable segments.
    let capacity = peak / 10 * 9;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("smaller-card.pickle");
    let written = out.to_str().unwrap();
    let cap = capacity.to_string();
    common::vramtrace_ok(&[
        "whatif",
        "--no-search",
        "--set",
        set,
        "--capacity",
        &cap,
        "-o",
        written,
        file,
    ]);
    let truth = common::python_list(EXPANDABLE_BY_PICKLE, &[&out]);
    assert!(
        truth[0].as_u64().unwrap() > 0,
        "no expandable segment: {truth:?}"
    );
    assert_eq!(truth[2], true, "{truth:?}");
    let ooms = truth[3].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{truth:?}");
    let (size, device_free) = (ooms[0][0].as_u64().unwrap(), ooms[0][1].as_u64().unwrap());
    assert_eq!(device_free, capacity - truth[1].as_u64().unwrap());

    let oom = json(&["oom", "--json", written]);
    let failures = oom["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{oom}");
    let f = &failures[0];
    assert_eq!(f["requested_bytes"], size);
    assert_eq!(f["driver_free_bytes"], device_free);
    assert_eq!(f["allocator"]["expandable_segments"], true);
    assert_eq!(f["verdict"], "fragmentation");
    let explanation = f["explanation"].as_str().unwrap();
    assert!(explanation.contains("mapped pages"), "{explanation}");
    assert!(explanation.contains("unmapped"), "{explanation}");
    let advice: Vec<&str> = f["advice"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        !advice
            .iter()
            .any(|a| a.contains("=expandable_segments:True")),
        "{advice:?}"
    );
    assert!(
        advice
            .iter()
            .any(|a| a.contains("already had expandable_segments:True")),
        "{advice:?}"
    );
    let already = &f["avoided_by"]["already_set"];
    assert!(
        already.as_array().unwrap().iter().any(|s| s == set),
        "{already}"
    );
}
