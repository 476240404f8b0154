//! The allocator model against histories that exercise one rule each, their addresses and
//! segment events worked out by hand (whatif_generated.py says which rule each case is),
//! written by Python's own pickle.

use std::path::{Path, PathBuf};

mod common;
use serde_json::Value;
use vramtrace_analyzer::snapshot::{read_snapshot, Snapshot};
use vramtrace_analyzer::whatif::from_snapshot::histories;
use vramtrace_analyzer::whatif::replay::Outcome;
use vramtrace_analyzer::whatif::search::smallest_capacity;
use vramtrace_analyzer::whatif::{replay, Driver, History, Settings};

const MIB: u64 = 1 << 20;

fn generate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/whatif_generated.py");
    common::python3(&[script.to_str().unwrap(), dir.path().to_str().unwrap()]);
    dir
}

fn load(dir: &Path, case: &str) -> (Snapshot, History) {
    let snap = read_snapshot(&dir.join(format!("{case}.pickle"))).unwrap();
    let settings = Settings::from_recorded(snap.allocator_settings.as_ref()).unwrap();
    let mut hs = histories(&snap, &settings).unwrap();
    assert_eq!(hs.len(), 1);
    (snap, hs.remove(0))
}

fn expected(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap()
}

/// Replays `case` under its recorded settings: no drift, and the replayed trace and final
/// segments are the recorded ones, compared here entry by entry and block by block.
fn replays_exactly(dir: &Path, case: &str) -> Outcome {
    let (snap, h) = load(dir, case);
    let o = replay(&h, &h.settings, Driver::Recorded, true).unwrap();
    assert_eq!(o.drift, None, "{case}");
    assert_eq!(o.replayed, h.events.len(), "{case}");
    let d = &snap.devices[0];
    let recorded: Vec<(&str, u64, u64)> = d
        .trace
        .iter()
        .map(|e| (e.action.name(), e.addr, e.size))
        .collect();
    let replayed: Vec<(&str, u64, u64)> =
        o.trace.iter().map(|e| (e.action, e.addr, e.size)).collect();
    assert_eq!(replayed, recorded, "{case}: trace");
    let written = vramtrace_analyzer::whatif::write::snapshot([(&o, d)], &h.settings);
    assert_eq!(
        common::layout(&written, 0),
        common::layout(&snap, 0),
        "{case}: final segments"
    );
    o
}

#[test]
fn each_rule_replays_at_the_recorded_addresses() {
    let dir = generate();
    for case in [
        "small_pool",
        "large_pool",
        "max_split",
        "oom_release",
        "empty_cache",
        "roundup",
        "pending_free",
        "late_start",
        "late_start_unsplit",
        "card",
        "gc",
        "avoidable",
        "expandable",
        "expandable_hole",
    ] {
        replays_exactly(dir.path(), case);
    }
}

#[test]
fn the_recorded_out_of_memory_error_is_replayed_as_one() {
    let dir = generate();
    let o = replays_exactly(dir.path(), "oom_release");
    assert_eq!(o.failures.len(), 1);
    assert!(o.failures[0].recorded);
    assert_eq!(o.failures[0].requested, 100 * MIB);
}

/// expandable.pickle: whatif_generated.py works out each page mapped and unmapped.
#[test]
fn expandable_segments_map_and_unmap_pages_as_recorded() {
    let dir = generate();
    let o = replays_exactly(dir.path(), "expandable");
    let want = &expected(dir.path())["expandable"];
    assert_eq!(o.peak_reserved, want["peak_reserved"].as_u64().unwrap());
    assert_eq!(o.allocator.reserved, want["end_reserved"].as_u64().unwrap());
    assert_eq!(o.failures.len(), 1);
    assert!(o.failures[0].recorded);
    let o = replays_exactly(dir.path(), "expandable_hole");
    let want = &expected(dir.path())["expandable_hole"];
    assert_eq!(o.peak_reserved, want["peak_reserved"].as_u64().unwrap());
}

/// avoidable.pickle on its 240 MiB card with expandable segments: the 200 MiB segment,
/// split for 30 MiB, grows by two 20 MiB pages (240 MiB reserved) to hold 200 MiB more.
#[test]
fn expandable_segments_grow_the_split_segment_instead_of_failing() {
    let dir = generate();
    let (_, h) = load(dir.path(), "avoidable");
    let card = Driver::Card(Some(240 * MIB));
    assert!(!replay(&h, &h.settings, card, false)
        .unwrap()
        .failures
        .is_empty());
    let mut s = h.settings.clone();
    s.set("expandable_segments:True").unwrap();
    let o = replay(&h, &s, card, false).unwrap();
    assert!(o.fits(), "{:?}", o.failures);
    assert_eq!(o.recorded_failures_served, 1);
    assert_eq!(o.peak_reserved, 240 * MIB);
    let tight = replay(&h, &s, Driver::Card(Some(238 * MIB)), false).unwrap();
    assert!(!tight.fits());
}

#[test]
fn the_state_at_a_late_trace_start_is_rebuilt() {
    let dir = generate();
    let o = replays_exactly(dir.path(), "late_start");
    let want = expected(dir.path())["late_start"]["start_reserved"]
        .as_u64()
        .unwrap();
    assert_eq!(o.start_reserved, want);
}

#[test]
fn a_drift_names_the_entry_both_addresses_and_what_lies_there() {
    let dir = generate();
    let (_, h) = load(dir.path(), "drift");
    let o = replay(&h, &h.settings, Driver::Recorded, false).unwrap();
    let want = &expected(dir.path())["drift"];
    let d = o.drift.expect("the replay drifts");
    assert_eq!(d.entry as u64, want["entry"].as_u64().unwrap());
    for key in ["recorded", "replayed"] {
        let addr = format!("{:#x}", want[key].as_u64().unwrap());
        assert!(d.message.contains(&addr), "{key} {addr} in {}", d.message);
    }
    assert!(d.message.contains("allocated block"), "{}", d.message);
}

/// card.pickle: a 20 MiB segment cached, then a 30 MiB request (entry 5).
#[test]
fn a_card_fits_the_run_when_freeing_the_cache_makes_room() {
    let dir = generate();
    let (_, h) = load(dir.path(), "card");
    let s = &h.settings;
    let at = |cap| replay(&h, s, Driver::Card(Some(cap)), false).unwrap();
    assert!(at(30 * MIB).fits());
    assert_eq!(at(30 * MIB).peak_reserved, 30 * MIB);
    let tight = at(28 * MIB);
    let f = tight.new_failure().expect("28 MiB is too little");
    assert_eq!((f.entry, f.requested), (5, 30 * MIB));
    let unlimited = replay(&h, s, Driver::Card(None), false).unwrap();
    assert_eq!(unlimited.peak_reserved, 50 * MIB);
    let search = smallest_capacity(&h, s).unwrap();
    assert_eq!(search.smallest, Some(30 * MIB));
    assert!(search.replays <= 20, "{} replays", search.replays);
}

/// gc.pickle: 20 MiB cached and 24 MiB held, then 30 MiB more, on a 100 MiB card.
#[test]
fn garbage_collection_frees_idle_segments_above_its_threshold_under_a_fraction() {
    let dir = generate();
    let (_, h) = load(dir.path(), "gc");
    let card = Driver::Card(Some(100 * MIB));
    let end = |conf: &str| {
        let mut s = h.settings.clone();
        s.set(conf).unwrap();
        let o = replay(&h, &s, card, false).unwrap();
        (o.allocator.reserved, o.new_failure().map(|f| f.entry))
    };
    // 0.3 x 80 MiB = 24 MiB < 44 MiB reserved: the idle 20 MiB segment goes first.
    assert_eq!(
        end("per_process_memory_fraction:0.8,garbage_collection_threshold:0.3"),
        (54 * MIB, None)
    );
    // No collection without a threshold, nor without a fraction.
    assert_eq!(end("per_process_memory_fraction:0.8"), (74 * MIB, None));
    assert_eq!(end("garbage_collection_threshold:0.3"), (74 * MIB, None));
    // 50 MiB allowed: even with the cache freed, 24 + 30 MiB does not fit.
    assert_eq!(end("per_process_memory_fraction:0.5").1, Some(7));
}

#[test]
fn settings_parse_pytorch_vocabulary_and_refuse_what_pytorch_refuses() {
    let mut s = Settings::default();
    s.set("max_split_size_mb:128,roundup_power2_divisions:[1:2,4:4,>:8]")
        .unwrap();
    assert_eq!(s.max_split_size, 128 * MIB);
    assert_eq!(&s.roundup_power2_divisions[..4], &[2, 0, 4, 8]);
    assert_eq!(s.roundup_power2_divisions[15], 8);
    assert!(s.set("max_split_size_mb:20").is_err());
    assert!(s.set("roundup_power2_divisions:3").is_err());
    assert!(s.set("garbage_collection_threshold:1.5").is_err());
    assert!(s.set("no_such_key:1").is_err());
    let (_, h) = load(generate().path(), "card");
    let mut e = h.settings.clone();
    e.set("expandable_segments:True,max_split_size_mb:128")
        .unwrap();
    let err = replay(&h, &e, Driver::Card(None), false).unwrap_err();
    assert!(err.contains("not modelled"), "{err}");
}

#[test]
fn the_cli_compares_settings_finds_the_smallest_card_and_writes_the_replay() {
    let dir = generate();
    let input = dir.path().join("card.pickle");
    let out = dir.path().join("out.pickle");
    let (doc, code, _) = common::json_view(&[
        "whatif",
        "--json",
        "--compare",
        "--capacity",
        "28MiB",
        "--set",
        "max_split_size_mb:64",
        "-o",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    let sc = doc["devices"][0]["scenarios"].as_array().unwrap();
    let names: Vec<&str> = sc.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["recorded", "recorded on 28.0 MiB", "max_split_size_mb:64"]
    );
    assert_eq!(sc[0]["drift"], Value::Null);
    assert_eq!(sc[0]["smallest_capacity_bytes"], 30 * MIB);
    assert!(sc[0]["capacity_search_replays"].as_u64().unwrap() <= 20);
    assert_eq!(sc[1]["failures"][0]["entry"], 5);
    assert_eq!(sc[1]["failures"][0]["requested_bytes"], 30 * MIB);
    // The written replay (the last scenario, on 28 MiB) read by Python's own pickle.
    let text = common::python3(&[
        "-c",
        "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); \
         print([(e['action'], e['size']) for e in d['device_traces'][0]]); \
         print(len(d['segments']), d['allocator_settings']['max_split_size'])",
        out.to_str().unwrap(),
    ]);
    let m = MIB;
    assert_eq!(
        text,
        format!(
            "[('segment_alloc', {}), ('alloc', {}), ('free_requested', {}), ('free_completed', {}), \
             ('segment_free', {}), ('oom', {})]\n0 {}\n",
            20 * m,
            5 * m,
            5 * m,
            5 * m,
            20 * m,
            30 * m,
            64 * m
        )
    );
}

/// avoidable.pickle: the whatif.py comment works out why max_split_size_mb:128 avoids it.
#[test]
fn the_oom_post_mortem_says_which_settings_would_have_avoided_it() {
    let dir = generate();
    let input = dir.path().join("avoidable.pickle");
    let (doc, code, _) = common::json_view(&["oom", "--json", input.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let a = &doc["failures"][0]["avoided_by"];
    assert_eq!(a["capacity_bytes"], 240 * MIB);
    assert_eq!(a["reproduced"], true);
    let got: Vec<(&str, bool)> = a["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["settings"].as_str().unwrap(),
                s["avoids"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("expandable_segments:True", true),
            ("max_split_size_mb:128", true),
            ("max_split_size_mb:512", false),
            ("roundup_power2_divisions:4", false)
        ]
    );
    let text = common::vramtrace_ok(&["oom", input.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("by replay on 240.0 MiB: expandable_segments:True would have avoided it; max_split_size_mb:128 would have avoided it; max_split_size_mb:512 would not"),
        "{text}"
    );
}

/// A `vramtrace run` directory: the hook's snapshot, without settings (PyTorch < 2.4),
/// and torch-HOST-PID.json (torch-PID.json from older hooks) with the
/// PYTORCH_CUDA_ALLOC_CONF the process had.
#[test]
fn a_run_directory_replays_its_snapshot_under_the_saved_environment() {
    for (snapshot, info) in [
        ("torch-snapshot-node1-4242.pickle", "torch-node1-4242.json"),
        ("torch-snapshot-4242.pickle", "torch-4242.json"),
    ] {
        run_directory_with(snapshot, info);
    }
}

fn run_directory_with(snapshot: &str, info: &str) {
    let dir = generate();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::copy(
        dir.path().join("max_split_unrecorded.pickle"),
        run.join(snapshot),
    )
    .unwrap();
    let whatif = || {
        let (doc, code, err) =
            common::json_view(&["whatif", "--json", "--no-search", run.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        doc
    };
    // Under the defaults the 30 MiB request (entry 5) takes the cached 70 MiB block.
    let defaults = whatif();
    assert_eq!(defaults["recorded_settings"], "defaults");
    let drift = &defaults["devices"][0]["scenarios"][0]["drift"];
    assert_eq!(drift["entry"], 5);
    let message = drift["message"].as_str().unwrap();
    assert!(message.contains("replayed at 0x7f2000000000"), "{message}");
    std::fs::write(
        run.join(info),
        r#"{"pid": 4242, "PYTORCH_ALLOC_CONF": null, "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:40"}"#,
    )
    .unwrap();
    let doc = whatif();
    assert_eq!(doc["recorded_settings"], "max_split_size_mb:40");
    assert_eq!(doc["devices"][0]["scenarios"][0]["drift"], Value::Null);
}

/// Without --capacity, other settings are replayed on the card the recorded failure shows.
#[test]
fn other_settings_are_replayed_on_the_card_the_recorded_failure_shows() {
    let dir = generate();
    let input = dir.path().join("avoidable.pickle");
    let (doc, code, _) = common::json_view(&[
        "whatif",
        "--json",
        "--no-search",
        "--compare",
        "--set",
        "max_split_size_mb:128",
        input.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    let d = &doc["devices"][0];
    assert_eq!(d["recorded_card_bytes"], 240 * MIB);
    assert_eq!(d["recorded_card_entry"], 5);
    let recorded = &d["scenarios"][0];
    assert_eq!(recorded["drift"], Value::Null);
    assert_eq!(recorded["failures"][0]["recorded"], true);
    let alt = &d["scenarios"][1];
    assert_eq!(alt["driver"]["capacity_bytes"], 240 * MIB);
    assert_eq!(alt["failures"], serde_json::json!([]));
    assert_eq!(alt["recorded_failures_served"], 1);
}

#[test]
fn a_trace_that_disagrees_with_its_segments_is_an_error_naming_the_file_and_entry() {
    let dir = generate();
    let input = dir.path().join("inconsistent.pickle");
    let out = common::vramtrace(&["whatif", input.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("inconsistent.pickle: device 0: trace entry 1: alloc 0x7f0000000000"),
        "{err}"
    );
}

/// private_pool.pickle: the final segments name a private pool; the replay stops at the
/// request recorded in it, and says why, rather than drift.
#[test]
fn a_snapshots_private_pool_segment_stops_the_replay_at_its_request() {
    let dir = generate();
    let path = dir.path().join("private_pool.pickle");
    let (json, _, stderr) = common::json_view(&["whatif", "--json", path.to_str().unwrap()]);
    let text = json.to_string();
    assert!(text.contains("private pool (1, 0)"), "{stderr}: {json}");
    let (_, h) = load(dir.path(), "private_pool");
    assert_eq!(h.private.len(), 1);
    let o = replay(&h, &h.settings, Driver::Recorded, true).unwrap();
    let stop = o.not_modelled.as_ref().expect("the replay stops");
    assert_eq!(
        stop.entry as u64,
        expected(dir.path())["private_pool"]["stopped_at_entry"]
            .as_u64()
            .unwrap(),
        "{}",
        stop.message
    );
    assert_eq!(o.drift, None);
}
