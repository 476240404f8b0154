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
    // The groups carry the same labels.
    let mut from_groups: BTreeMap<String, u64> = BTreeMap::new();
    for g in device["groups"].as_array().unwrap() {
        let label = &g["label"];
        let key = key(label);
        *from_groups.entry(key.to_string()).or_default() += g["bytes"].as_u64().unwrap();
    }
    assert_eq!(out, from_groups);
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
        text.contains("user_metadata \"stage=warmup, step=3\""),
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
        stderr.contains("the user_metadata of 1 allocation left out"),
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
