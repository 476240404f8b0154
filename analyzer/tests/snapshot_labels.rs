//! PyTorch's own labels of a snapshot's tensors: the `user_metadata` of their `alloc`
//! entries and the private pool (`segment_pool_id`) of the segment that held them, as
//! groups of `peak`, against Python's own reading of the file
//! (`tests/workloads/labelled_snapshot.py`).

mod common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The workload that writes the snapshot and reads its labels with Python's `pickle`.
fn workload() -> std::path::PathBuf {
    vramtrace_tests::pages::root().join("tests/workloads/labelled_snapshot.py")
}

/// A label as the workload prints it: [user_metadata, pool, annotations].
fn key(label: &Value) -> String {
    let annotations = match &label["annotations"] {
        Value::Null => serde_json::json!([]),
        a => a.clone(),
    };
    serde_json::json!([label["user_metadata"], label["pool"], annotations]).to_string()
}

/// `peak --json` of `path` (at `at`, or the peak) as bytes by [metadata, pool].
fn labels(path: &Path, at: Option<&str>) -> BTreeMap<String, u64> {
    let mut args = vec!["peak", "--json"];
    if let Some(at) = at {
        args.extend(["--at", at]);
    }
    args.push(path.to_str().unwrap());
    let (v, _, _) = common::json_view(&args);
    let device = &v["devices"][0];
    let mut out = BTreeMap::new();
    for l in device["labels"].as_array().expect("labels") {
        let label = &l["label"];
        let key = key(label);
        out.insert(key.to_string(), l["bytes"].as_u64().unwrap());
    }
    // The groups are the call sites: the same bytes in all.
    let groups = device["groups"].as_array().unwrap();
    let in_groups: u64 = groups.iter().map(|g| g["bytes"].as_u64().unwrap()).sum();
    assert_eq!(in_groups, out.values().sum::<u64>());
    out
}

fn python(path: &Path, entries: i64) -> BTreeMap<String, u64> {
    let script = workload();
    let (script, path) = (script.to_str().unwrap(), path.to_str().unwrap());
    let out = common::python3(&[script, "labels", path, &entries.to_string()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].to_string(), p[1].as_u64().unwrap()))
        .collect()
}

/// The workload's snapshot, written in `dir`.
fn written(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("labels.pickle");
    let script = workload();
    common::python3(&[script.to_str().unwrap(), "write", path.to_str().unwrap()]);
    path
}

#[test]
fn tensors_are_grouped_by_their_user_metadata_and_private_pool_as_python_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path());
    // At the end (no tensor is freed after entry 8, so the peak is the end).
    let want = python(&path, -1);
    assert!(want.len() >= 5, "{want:?}");
    assert_eq!(labels(&path, None), want);
    // After the first making of R's segment: its tensor was in no pool.
    let mid = python(&path, 7);
    assert!(mid.contains_key(r#"["first",null,[]]"#), "{mid:?}");
    // Entry 6 (the tensor's alloc) is at 17 us; the history starts at 11 us.
    assert_eq!(labels(&path, Some("6500ns")), mid);

    let out = common::vramtrace_ok(&["peak", "--by", "label", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#"user_metadata {"stage": "warmup", "step": "3", "warm": "True"}"#),
        "{text}"
    );
    assert!(
        text.contains("private pool (2, 3), annotated \"from before\""),
        "{text}"
    );
    assert!(text.contains("annotated \"a\", \"b\""), "{text}");
    assert!(text.contains("no label"), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the user_metadata of 1 history entry left out"),
        "{stderr}"
    );
    assert!(stderr.contains("1 annotation left out"), "{stderr}");
}

#[test]
fn real_snapshots_without_labels_say_so() {
    let Some(files) = vramtrace_tests::fixtures::snapshots() else {
        return;
    };
    let path = files[0].to_str().unwrap();
    let out = common::vramtrace_ok(&["peak", "--by", "label", path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no tensor has a label here"), "{text}");
}

#[test]
fn the_memory_viz_export_keeps_the_labels() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path());
    let exported = dir.path().join("exported.pickle");
    let args = ["export", "--format", "memory-viz", "-o"];
    let mut args = args.to_vec();
    args.extend([exported.to_str().unwrap(), path.to_str().unwrap()]);
    common::vramtrace_ok(&args);
    // Read back, it says what the original says, and fits its own final segments.
    let out = common::vramtrace_ok(&["peak", exported.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("does not fit"), "{stderr}");
    assert_eq!(labels(&exported, None), python(&path, -1));
}

/// Writes `script` (after `common`'s `one_segment_each`) to a snapshot in `dir`.
fn crafted(dir: &Path, script: &str) -> std::path::PathBuf {
    let path = dir.join("crafted.pickle");
    common::write_snapshot(script, &path);
    path
}

#[test]
fn one_call_site_under_many_labels_is_one_group_split_by_label() {
    let dir = tempfile::tempdir().unwrap();
    // One site allocates four 1 MiB tensors, each under its step's metadata; another one
    // 2 MiB tensor: the site holds the most.
    let path = crafted(
        dir.path(),
        r#"
site = [{"filename": "train.py", "line": 10, "name": "cache"}]
other = [{"filename": "train.py", "line": 20, "name": "buf"}]
segments, trace = one_segment_each([(M, site)] * 4 + [(2 * M, other)])
allocs = [e for e in trace if e["action"] == "alloc"]
for i, e in enumerate(allocs[:4]):
    e["user_metadata"] = f"step {i}"
pickle.dump({"segments": segments, "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#,
    );
    let (v, _, _) = common::json_view(&["peak", "--json", path.to_str().unwrap()]);
    let device = &v["devices"][0];
    let groups = device["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0]["bytes"].as_u64(), Some(4 << 20));
    assert_eq!(groups[0]["labels_differ"], true);
    assert_eq!(device["labels"].as_array().unwrap().len(), 5);
    let out = common::vramtrace_ok(&["summary", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("4.0 MiB in 4 tensors, from cache"), "{text}");
    let (leaks, _, _) = common::json_view(&["leaks", "--json", path.to_str().unwrap()]);
    let rows = leaks["tensor_groups"].as_array().expect("tensor_groups");
    assert_eq!(rows.len(), 2, "{rows:?}");
}

#[test]
fn tensors_without_frames_or_from_before_the_history_keep_their_pool() {
    let dir = tempfile::tempdir().unwrap();
    // A private pool's 4 MiB segment from before the history holds two 1 MiB tensors;
    // the history frees one of them (at 2 us), then allocates a frameless one with
    // metadata in another private segment.
    let path = crafted(
        dir.path(),
        r#"
P, Q = 1 << 32, (1 << 32) + 64 * M
def blk(addr, size, state="active_allocated"):
    return {"address": addr, "size": size, "requested_size": size, "state": state, "frames": []}
segments = [
    {"device": 0, "address": P, "total_size": 4 * M, "allocated_size": M, "active_size": M,
     "requested_size": M, "stream": 0, "segment_type": "large", "segment_pool_id": (1, 0),
     "blocks": [blk(P, M), blk(P + M, 3 * M, "inactive")]},
    {"device": 0, "address": Q, "total_size": 2 * M, "allocated_size": M, "active_size": M,
     "requested_size": M, "stream": 0, "segment_type": "large", "segment_pool_id": (2, 0),
     "blocks": [blk(Q, M), blk(Q + M, M, "inactive")]},
]
e = lambda action, addr, size, t, **k: dict(action=action, addr=addr, size=size, stream=0,
                                             time_us=t, **k)
trace = [
    e("free_requested", P + M, M, 1, frames=[]),
    e("free_completed", P + M, M, 2, frames=[]),
    e("segment_alloc", Q, 2 * M, 3, frames=[]),
    e("alloc", Q, M, 4, frames=[], user_metadata="comm"),
]
pickle.dump({"segments": segments, "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#,
    );
    let before = labels(&path, Some("0"));
    assert_eq!(
        before.get(r#"[null,[1,0],[]]"#),
        Some(&(2 << 20)),
        "{before:?}"
    );
    let end = labels(&path, Some("3us"));
    assert_eq!(end.get(r#"[null,[1,0],[]]"#), Some(&(1 << 20)), "{end:?}");
    assert_eq!(end.get(r#"["comm",[2,0],[]]"#), Some(&(1 << 20)), "{end:?}");
}

#[test]
fn past_the_most_labels_pools_are_kept_and_long_shared_metadata_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // 10,100 tensors, each under metadata of its own, in one private pool's segment; one
    // in 500 names a dict whose values are one 1 MB string the pickle shares.
    let path = crafted(
        dir.path(),
        r#"
P = 1 << 32
n = 10100
S = 2 * M
blocks = [{"address": P + i * S, "size": S, "requested_size": S,
           "state": "active_allocated", "frames": []} for i in range(n)]
segments = [{"device": 0, "address": P, "total_size": S * n, "allocated_size": S * n,
             "active_size": S * n, "requested_size": S * n, "stream": 0,
             "segment_type": "large", "segment_pool_id": (1, 0), "blocks": blocks}]
site = [{"filename": "train.py", "line": 1, "name": "f"}]
big = "x" * 1000000
wide = {f"k{j}": big for j in range(256)}
trace = [{"action": "segment_alloc", "addr": P, "size": S * n, "stream": 0,
          "time_us": 1, "frames": site}]
for i in range(n):
    meta = wide if i % 500 == 0 else f"step {i}"
    trace.append({"action": "alloc", "addr": P + i * S, "size": S, "stream": 0,
                  "time_us": 2 + i, "frames": site, "user_metadata": meta})
pickle.dump({"segments": segments, "device_traces": [trace]}, open(sys.argv[1], "wb"))
"#,
    );
    let started = std::time::Instant::now();
    let (v, _, stderr) = common::json_view(&["peak", "--json", path.to_str().unwrap()]);
    let labels = v["devices"][0]["labels"].as_array().unwrap();
    // Every tensor keeps its pool, labelled or not.
    let pooled: u64 = labels
        .iter()
        .filter(|l| l["label"]["pool"] == serde_json::json!([1, 0]))
        .map(|l| l["blocks"].as_u64().unwrap())
        .sum();
    assert_eq!(pooled, 10100);
    assert!(
        stderr.contains("left out: past 10000 distinct labels"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the user_metadata of 21 history entries left out"),
        "{stderr}"
    );
    // Checked before copied: not 5 GB of copies.
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
}
