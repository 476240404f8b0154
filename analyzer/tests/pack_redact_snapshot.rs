//! `pack --redact` keeps PyTorch snapshots, with every frame's path cut to its file name:
//! checked on real snapshots by Python's own `pickle` (no path left, every frame's
//! function, line and file name as in the original), and by the views (the same figures).

use serde_json::Value;
use std::io::Read;
use std::path::Path;

mod common;

/// Every frame of a snapshot (segments', blocks', history's) as [name, line, file name],
/// sorted, and how many of them still hold a `/`.
const FRAMES_BY_PICKLE: &str = r#"
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
frames = []
for seg in s["segments"]:
    frames += seg.get("frames", [])
    for b in seg["blocks"]:
        frames += b.get("frames", [])
for t in s["device_traces"]:
    for e in t:
        frames += e.get("frames", [])
paths = sum("/" in f["filename"] for f in frames)
out = sorted([f["name"], f["line"], f["filename"].rsplit("/", 1)[-1]] for f in frames)
print(json.dumps([paths, out]))
"#;

/// The member `name` of a pack, unpacked here with the zstd and tar crates.
fn member(pack: &Path, name: &str) -> Vec<u8> {
    let file = std::fs::File::open(pack).unwrap();
    let mut tar = tar::Archive::new(zstd::stream::read::Decoder::new(file).unwrap());
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().to_string_lossy() == name {
            let mut out = Vec::new();
            entry.read_to_end(&mut out).unwrap();
            return out;
        }
    }
    panic!("no {name} in {pack:?}");
}

fn peaks(path: &Path) -> Vec<(Value, Value)> {
    let out = common::vramtrace_ok(&["summary", "--json", path.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["processes"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["peak_reserved_bytes"].clone(),
                d["peak_requested_bytes"].clone(),
            )
        })
        .collect()
}

#[test]
fn redact_keeps_snapshots_with_file_names_only() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "kkaitlyn111_memory_ctx512_forward_mixed.pickle",
        "EoR_NN_snapshot.pickle",
    ] {
        let original = dir.join(name);
        let run = tmp.path().join(name.replace('.', "-"));
        std::fs::create_dir(&run).unwrap();
        std::fs::copy(&original, run.join(name)).unwrap();
        let pack = tmp.path().join(format!("{name}.vtpack"));
        common::vramtrace_ok(&[
            "pack",
            "--redact",
            "-o",
            pack.to_str().unwrap(),
            run.to_str().unwrap(),
        ]);
        let redacted = tmp.path().join(format!("redacted-{name}"));
        std::fs::write(&redacted, member(&pack, name)).unwrap();

        let before = common::python_list(FRAMES_BY_PICKLE, &[&original]);
        let after = common::python_list(FRAMES_BY_PICKLE, &[&redacted]);
        assert!(
            before[0].as_u64().unwrap() > 0,
            "{name}: the original has paths"
        );
        assert_eq!(after[0], 0, "{name}: a path is left");
        assert_eq!(after[1], before[1], "{name}: frames changed otherwise");
        assert_eq!(peaks(&pack), peaks(&original), "{name}");
    }
}
