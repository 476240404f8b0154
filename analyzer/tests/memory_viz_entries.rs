//! The memory-viz export keeps the newest `--max-entries` trace entries per device (all
//! with 0) and says what it kept and what it left out; the entries in the file are counted
//! by Python's own `pickle`.

use std::path::Path;

mod common;
use common::*;

/// A trace of `pairs` cudaMalloc/cudaFree pairs on device 0: 5 entries each in the
/// export (without allocator annotations each allocation is a segment and one block
/// filling it: segment_alloc and alloc, then free_requested, free_completed and
/// segment_free).
fn trace(dir: &Path, pairs: u64) -> std::path::PathBuf {
    let mut lines = vec![header(100, "node1", 0, 1_700_000_000_000_000_000, None)];
    for i in 0..pairs {
        let addr = 0x7f00_0000_0000 + i * MIB;
        lines.push(alloc(2 * i * MS, 0, "cudaMalloc", addr, MIB));
        lines.push(free((2 * i + 1) * MS, 0, "cudaFree", addr));
    }
    lines.push(end(2 * pairs * MS, 2 * pairs));
    write_trace(dir, "t.jsonl", &lines)
}

fn entries_in(pickle: &Path) -> u64 {
    let script = "import pickle, sys; s = pickle.load(open(sys.argv[1], 'rb')); \
                  print(sum(len(t) for t in s['device_traces']))";
    python3(&["-c", script, pickle.to_str().unwrap()])
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn max_entries_chooses_what_is_kept_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 50);
    let all = 5 * 50;
    for (flag, kept) in [(None, all), (Some("10"), 10), (Some("0"), all)] {
        let out_file = dir
            .path()
            .join(format!("out-{}.pickle", flag.unwrap_or("default")));
        let mut args = vec![
            "export",
            "--format",
            "memory-viz",
            "-o",
            out_file.to_str().unwrap(),
        ];
        if let Some(n) = flag {
            args.extend(["--max-entries", n]);
        }
        args.push(t.to_str().unwrap());
        let out = vramtrace_ok(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(entries_in(&out_file), kept, "{flag:?}");
        if kept == all {
            assert!(
                stderr.contains(&format!("kept all {all} trace entries")),
                "{stderr}"
            );
        } else {
            let said = format!(
                "kept the newest {kept} trace entries of {all}, left out the oldest {}",
                all - kept
            );
            assert!(stderr.contains(&said), "{stderr}");
        }
    }
}
