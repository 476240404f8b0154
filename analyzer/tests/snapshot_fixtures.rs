//! The real PyTorch snapshots in shared/fixtures/torch-snapshots reproduce the figures their
//! README lists (read with Python's own pickle when they were collected).

mod common;

use serde_json::Value;
use std::path::PathBuf;
use vramtrace_analyzer::snapshot::{figures, read_snapshot, Action, Generation};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/torch-snapshots")
}

/// One README row: file, segments, blocks, R and A as written (MiB, two decimals).
struct Row {
    file: String,
    segments: usize,
    blocks: usize,
    reserved_mib: String,
    allocated_mib: String,
    /// History entries over all devices ("5803 on one device", "one `snapshot` entry",
    /// "none").
    entries: usize,
}

fn readme_rows() -> Vec<Row> {
    let text = std::fs::read_to_string(fixtures().join("README.md")).expect("fixture README");
    text.lines()
        .filter(|l| l.starts_with("| ") && l.contains(".p"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // | file | source | format | segments / blocks | R / A | trace entries |
            let (s, b) = cells[4].split_once('/').expect("segments / blocks");
            let (r, a) = cells[5].split_once('/').expect("R / A");
            Row {
                file: cells[1].to_string(),
                segments: s.trim().parse().unwrap(),
                blocks: b.trim().parse().unwrap(),
                reserved_mib: r.trim().to_string(),
                allocated_mib: a.trim().to_string(),
                entries: match cells[6].split_whitespace().next() {
                    Some("none") => 0,
                    Some("one") => 1,
                    n => n.and_then(|n| n.parse().ok()).expect("trace entries"),
                },
            }
        })
        .collect()
}

fn mib(b: u64) -> String {
    format!("{:.2}", b as f64 / (1u64 << 20) as f64)
}

#[test]
fn every_fixture_reproduces_its_readme_figures() {
    if common::fixtures().is_none() {
        return;
    }
    let rows = readme_rows();
    // Every snapshot in the directory has its row, and every row its file.
    let mut listed: Vec<&str> = rows.iter().map(|r| r.file.as_str()).collect();
    listed.sort_unstable();
    let mut present: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "README.md")
        .collect();
    present.sort_unstable();
    assert_eq!(listed, present, "the README's rows and the files beside it");
    for row in rows {
        let snap = read_snapshot(&fixtures().join(&row.file)).unwrap();
        let (mut segs, mut blocks, mut r, mut a) = (0, 0, 0, 0);
        let entries: usize = snap.devices.iter().map(|d| d.trace.len()).sum();
        assert_eq!(entries, row.entries, "{}: trace entries", row.file);
        for d in &snap.devices {
            let f = figures(d);
            segs += f.segments;
            blocks += f.blocks;
            r += f.reserved;
            a += f.allocated;
        }
        assert_eq!(segs, row.segments, "{}: segments", row.file);
        assert_eq!(blocks, row.blocks, "{}: blocks", row.file);
        assert_eq!(mib(r), row.reserved_mib, "{}: reserved MiB", row.file);
        assert_eq!(mib(a), row.allocated_mib, "{}: allocated MiB", row.file);
    }
}

#[test]
fn fixture_formats_devices_and_traces() {
    if common::fixtures().is_none() {
        return;
    }
    let eor = read_snapshot(&fixtures().join("EoR_NN_snapshot.pickle")).unwrap();
    assert_eq!(eor.generation, Generation::Dict);
    assert_eq!(eor.devices.len(), 1);
    assert_eq!(
        eor.devices[0].trace.len(),
        5803,
        "5803 entries on one device"
    );
    assert!(eor.devices[0].trace.iter().all(|e| e.time_us.is_some()));
    assert!(eor.devices[0].trace.iter().any(|e| !e.frames.is_empty()));

    let llm = read_snapshot(&fixtures().join("LLM-inference_oom_snapshot.pickle")).unwrap();
    assert_eq!(
        llm.generation,
        Generation::History,
        "2.0-era blocks with history"
    );
    let trace = &llm.devices[0].trace;
    assert_eq!(trace.len(), 1);
    assert_eq!(trace[0].action, Action::Snapshot);
    // Blocks carry no address: each starts where the one before it ends.
    for s in &llm.devices[0].segments {
        assert_eq!(s.blocks[0].address, s.address);
        let end = s.blocks.last().map(|b| b.address + b.size).unwrap();
        assert_eq!(end, s.address + s.total_size);
    }

    let silmont = read_snapshot(&fixtures().join("silmont_mem_snapshot.pickle")).unwrap();
    let settings = silmont
        .allocator_settings
        .as_ref()
        .expect("allocator_settings");
    assert_eq!(settings["max_split_size"], -1);
    assert_eq!(settings["expandable_segments"], false);
    assert_eq!(silmont.devices[0].trace.len(), 97);

    let layout = read_snapshot(&fixtures().join("LayoutEditing_memory_snapshot.pkl")).unwrap();
    assert_eq!(layout.generation, Generation::SegmentList);
    assert_eq!(layout.devices.len(), 1);
    assert_eq!(layout.devices[0].device, 1);
    assert!(layout.devices[0].trace.is_empty());

    let select = read_snapshot(&fixtures().join("select_n_dec166a_snapshot.pickle")).unwrap();
    assert_eq!(select.device_count, Some(4), "four (empty) device traces");
    assert_eq!(select.devices.len(), 1, "device 1 only");
    assert_eq!(select.devices[0].device, 1);
    assert!(select.devices[0].trace.is_empty());
}

/// `vramtrace snapshot --json` of a fixture: its first device.
fn snapshot_json(file: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(["snapshot", "--json"])
        .arg(fixtures().join(file))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["devices"][0].clone()
}

#[test]
fn a_complete_history_unwinds_to_an_empty_process() {
    if common::fixtures().is_none() {
        return;
    }
    // silmont's 97 entries start with the process's first segment_alloc: the allocator
    // model, walked back from the snapshot, must start from nothing reserved or in use.
    let snap = read_snapshot(&fixtures().join("silmont_mem_snapshot.pickle")).unwrap();
    assert_eq!(snap.devices[0].trace[0].action, Action::SegmentAlloc);
    let d = snapshot_json("silmont_mem_snapshot.pickle");
    assert_eq!(d["trace_consistent"], true, "{d}");
    assert_eq!(d["trace_start_reserved_bytes"], 0, "{d}");
    assert_eq!(d["trace_start_allocated_bytes"], 0, "{d}");
    assert_eq!(d["trace_start_requested_bytes"], 0, "{d}");
    // After the last entry: the snapshot itself, as the fixture README gives it.
    let row = readme_rows()
        .into_iter()
        .find(|r| r.file == "silmont_mem_snapshot.pickle")
        .expect("a README row");
    assert_eq!(mib(d["reserved_bytes"].as_u64().unwrap()), row.reserved_mib);
}

#[test]
fn a_wrapped_ring_buffer_is_anchored_at_the_snapshot() {
    if common::fixtures().is_none() {
        return;
    }
    // EoR_NN's history began after the process had memory: summing its entries forward
    // from zero with Python's pickle gives 109051904 reserved (segment_alloc - segment_free)
    // and 39976976 requested (alloc - free_completed), against 134217728 and 48748928 in
    // the snapshot's segments. So before its first entry, 25165824 were reserved and
    // 8771952 requested.
    let d = snapshot_json("EoR_NN_snapshot.pickle");
    assert_eq!(d["trace_consistent"], true, "{d}");
    assert_eq!(d["trace_start_reserved_bytes"], 134_217_728 - 109_051_904);
    assert_eq!(d["trace_start_requested_bytes"], 48_748_928 - 39_976_976);
}

#[test]
fn the_text_summary_names_the_snapshot_as_the_command() {
    if common::fixtures().is_none() {
        return;
    }
    // A snapshot records no command line: the summary's process line names the file, as
    // the report does, rather than nothing.
    let path = fixtures().join("silmont_mem_snapshot.pickle");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .arg("summary")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.starts_with("process ")).unwrap();
    assert!(
        line.ends_with(&format!(": {}", path.display())),
        "the process line names the file: {line}"
    );
}
