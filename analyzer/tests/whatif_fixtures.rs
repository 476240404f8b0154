//! Every real PyTorch snapshot with a history, replayed under the settings it was recorded
//! with, reproduces what PyTorch did: each entry at its recorded address and size, the
//! segment events in order, and the final segments block by block.

use std::path::PathBuf;

mod common;
use common::layout;
use vramtrace_analyzer::snapshot::{read_snapshot, Action};
use vramtrace_analyzer::whatif::from_snapshot::histories;
use vramtrace_analyzer::whatif::{replay, write, Driver, Settings};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/torch-snapshots")
}

#[test]
fn every_real_snapshot_with_a_history_replays_exactly() {
    if common::fixtures().is_none() {
        return;
    }
    let mut replayed = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pickle" || e == "pkl"))
        .collect();
    files.sort();
    for path in files {
        let snap = read_snapshot(&path).unwrap();
        let with_history = snap
            .devices
            .iter()
            .any(|d| d.trace.iter().any(|e| e.action == Action::Alloc));
        if !with_history {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let settings = Settings::from_recorded(snap.allocator_settings.as_ref()).unwrap();
        for h in histories(&snap, &settings).unwrap() {
            let o = replay(&h, &settings, Driver::Recorded, true).unwrap();
            assert_eq!(o.drift, None, "{name}");
            let d = snap.device(h.device).unwrap();
            // The recording less its `snapshot` markers, entry by entry.
            let recorded: Vec<(&str, u64, u64, u64)> = d
                .trace
                .iter()
                .filter(|e| e.action != Action::Snapshot)
                .map(|e| (e.action.name(), e.addr, e.size, e.stream))
                .collect();
            let got: Vec<(&str, u64, u64, u64)> = o
                .trace
                .iter()
                .map(|e| (e.action, e.addr, e.size, e.stream))
                .collect();
            assert_eq!(got.len(), recorded.len(), "{name}");
            for (i, (g, r)) in got.iter().zip(&recorded).enumerate() {
                assert_eq!(g, r, "{name}: entry {i} of the replay");
            }
            let written = write::snapshot([(&o, d)], &settings);
            assert_eq!(
                layout(&written, h.device),
                layout(&snap, h.device),
                "{name}"
            );
            replayed.push((name.clone(), recorded.len()));
        }
    }
    // The fixture README's snapshots with a history (counted with Python's pickle: the
    // entries less EoR_NN's 9 `snapshot` markers, which are no allocator event).
    replayed.sort();
    let expected = [
        ("EoR_NN_snapshot.pickle", 5803 - 9),
        ("Wedsonlin_128_inference.pickle", 3840),
        ("Wedsonlin_512_training.pickle", 22332),
        ("bcrafton_memory_snapshot.pickle", 6486),
        ("kkaitlyn111_memory_2.7b_forward.pickle", 8694),
        ("kkaitlyn111_memory_ctx128_fullstep_.pickle", 19770),
        ("kkaitlyn111_memory_ctx512_forward_mixed.pickle", 6765),
        ("silmont_mem_snapshot.pickle", 97),
    ];
    let expected: Vec<(String, usize)> =
        expected.iter().map(|&(f, n)| (f.to_string(), n)).collect();
    assert_eq!(replayed, expected);
}

/// `whatif -o` on a real snapshot: Python's own pickle reads the written file, and its
/// trace and segments are the recorded ones (the replay being exact).
#[test]
fn the_written_replay_of_a_real_snapshot_is_the_recording_for_python() {
    if common::fixtures().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replay.pickle");
    let input = fixtures().join("EoR_NN_snapshot.pickle");
    common::vramtrace_ok(&[
        "whatif",
        "-o",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    let compare = r#"
import pickle, sys
a = pickle.load(open(sys.argv[1], 'rb'))
b = pickle.load(open(sys.argv[2], 'rb'))
ta = [(e['action'], e['addr'], e['size'], e['stream'], len(e['frames'])) for e in a['device_traces'][0] if e['action'] != 'snapshot']
tb = [(e['action'], e['addr'], e['size'], e['stream'], len(e['frames'])) for e in b['device_traces'][0]]
sa = sorted((s['address'], s['total_size'], [(x['address'], x['size'], x['state']) for x in s['blocks']]) for s in a['segments'])
sb = sorted((s['address'], s['total_size'], [(x['address'], x['size'], x['state']) for x in s['blocks']]) for s in b['segments'])
print(len(tb), ta == tb, sa == sb)
"#;
    let got = common::python3(&[
        "-c",
        compare,
        input.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(got, "5794 True True\n");
}
