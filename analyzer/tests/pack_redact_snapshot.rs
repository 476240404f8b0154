//! `pack --redact` keeps PyTorch snapshots, each frame's path cut to what tells a library
//! from the user's code: checked on real snapshots by Python's own `pickle` (no directory
//! left outside a library's path, every frame's function, line and file as the rule gives
//! them) and by the views (the same figures, the same code holding the tensors' peak).

use serde_json::Value;
use std::io::Read;
use std::path::Path;

mod common;

/// Every frame of a snapshot (segments', blocks', history's) as [name, line, file], the
/// file as redaction must leave it: a library's path from its first library part on
/// (site-packages, dist-packages, torch, lib/python3), any other path its last part, a
/// `<...>` name as it is; sorted. With a second argument (the redacted file): the file as
/// it holds it; and first, how many files hold a directory outside a library's path.
const FRAMES_BY_PICKLE: &str = r#"
import json, pickle, sys
LIB = ["/site-packages/", "/dist-packages/", "/torch/", "/lib/python3", "/lib64/python3"]
def expected(p):
    at = [p.find(l) for l in LIB if l in p]
    if at:
        return p[min(at):]
    if p.startswith("<"):
        return "<redacted>" if "/" in p or "\\" in p else p
    parts = [x for x in p.replace("\\", "/").split("/") if x]
    return parts[-1] if parts else ""
s = pickle.load(open(sys.argv[1], "rb"))
kept = len(sys.argv) > 2
frames = []
for seg in s["segments"]:
    frames += seg.get("frames", [])
    for b in seg["blocks"]:
        frames += b.get("frames", [])
for t in s["device_traces"]:
    for e in t:
        frames += e.get("frames", [])
outside = sum("/" in f["filename"] and not any(f["filename"].startswith(l) for l in LIB)
              for f in frames)
out = sorted([f["name"], f["line"], f["filename"] if kept else expected(f["filename"])]
             for f in frames)
print(json.dumps([outside, out]))
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

/// The tensors at each GPU's peak: (bytes, [(function, line)] of their frames).
fn holders(path: &Path) -> Vec<(Value, Vec<(Value, Value)>)> {
    let out = common::vramtrace_ok(&["summary", "--json", path.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["tensors_at_peak"].as_array().unwrap().clone())
        .map(|g| {
            let frames = g["frames"].as_array().cloned().unwrap_or_default();
            let frames = frames
                .iter()
                .map(|f| (f["function"].clone(), f["line"].clone()))
                .collect();
            (g["bytes"].clone(), frames)
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
        let after = common::python_list(FRAMES_BY_PICKLE, &[&redacted, &redacted]);
        assert!(
            before[0].as_u64().unwrap() > 0,
            "{name}: the original has paths"
        );
        assert_eq!(after[0], 0, "{name}: a directory is left");
        assert_eq!(after[1], before[1], "{name}: frames changed otherwise");
        assert_eq!(peaks(&pack), peaks(&original), "{name}");
        // Who held the tensors' peak is still the user's code: the same functions, lines
        // and bytes (library frames still tell themselves from the user's).
        let held = holders(&original);
        assert!(!held.is_empty(), "{name}: no tensors at the peak");
        assert_eq!(holders(&pack), held, "{name}");
    }
}

/// A redacted pack whose every input is left out (a file named like a snapshot that is
/// not one) is refused, naming it, and leaves no empty pack behind.
#[test]
fn a_pack_of_nothing_but_unreadable_snapshots_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("noise.pickle");
    std::fs::write(&bad, b"\x00\x01 not a pickle").unwrap();
    let pack = tmp.path().join("out.vtpack");
    let out = common::vramtrace(&[
        "pack",
        "--redact",
        "-o",
        pack.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("nothing packed") && said.contains("noise.pickle"),
        "{said}"
    );
    assert!(!pack.exists());
}
