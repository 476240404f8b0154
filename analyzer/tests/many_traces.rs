//! A run of more traces than the process may hold files open: 128 nodes x 8 GPUs is an
//! ordinary run, past the usual limit of 1,024 descriptors.

mod common;

use common::*;
use std::process::Command;

#[test]
fn twelve_hundred_traces_are_read_under_a_limit_of_256_open_files() {
    const TRACES: u64 = 1200;
    let dir = tempfile::tempdir().unwrap();
    let mut total = 0;
    for i in 0..TRACES {
        // Every process takes its memory in the first 1.2 s and ends at 10 s: all of it
        // is live at once. Each also holds 1 MiB from 2 to 3 ms after its start: at
        // 1.2 s, when the last process takes its memory, the one before holds it.
        let size = (i % 7 + 1) * MIB;
        total += size;
        write_trace(
            dir.path(),
            &format!("vramtrace-n1-{i}.jsonl"),
            &[
                header(
                    i as u32 + 10,
                    "n1",
                    10 * S + i * MS,
                    1_700_000_000 * S,
                    None,
                ),
                alloc(MS, 0, "cudaMalloc", 1 << 40, size),
                alloc(2 * MS, 0, "cudaMalloc", 2 << 40, MIB),
                free(3 * MS, 0, "cudaFree", 2 << 40),
                end(10 * S, 3),
            ],
        );
    }
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_vramtrace"))
        .args(["summary", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let processes = v["processes"].as_array().unwrap();
    assert_eq!(processes.len() as u64, TRACES);
    assert!(processes
        .iter()
        .all(|p| p["events"] == 3 && p["complete"] == true));
    let gpu = &v["devices"][0];
    assert_eq!(gpu["peak_reserved_bytes"], total + MIB);
    assert_eq!(gpu["peak_time_ns"], TRACES * MS);
    assert_eq!(gpu["reserved_bytes_at_end"], 0);
}
