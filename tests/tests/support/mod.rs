//! Helpers shared by the fault, bad-input and security tests: running a workload under
//! `LD_PRELOAD` directly (so that the test picks the exact output path and can signal
//! the process itself), bare for comparison, and always under a deadline, so that a
//! deadlock fails the test instead of hanging the suite.
#![allow(dead_code)] // each test file uses its own part

pub mod reading;

use std::path::Path;
use std::process::{Command, Output};
pub use vramtrace_tests::harness::run_within;
use vramtrace_tests::harness::{clean_env, interposer, sim_dir, workload};

/// The workload with the simulated CUDA stack on its library path, without vramtrace.
pub fn bare(name: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(workload(name));
    clean_env(&mut cmd)
        .args(args)
        .env("LD_LIBRARY_PATH", sim_dir());
    cmd
}

/// The workload with `libvramtrace.so` preloaded, writing to the pattern `output`.
pub fn traced(name: &str, args: &[&str], output: &str) -> Command {
    let mut cmd = bare(name, args);
    cmd.env("LD_PRELOAD", interposer())
        .env("VRAMTRACE_OUTPUT", output);
    cmd
}

/// The `VRAMTRACE_TRUTH` lines of a run, with the fields that differ from run to run
/// (process ids) removed.
pub fn truths_without_pids(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(vramtrace_tests::truth::PREFIX))
        .map(|j| {
            let mut v: serde_json::Value = serde_json::from_str(j).expect("truth is JSON");
            let o = v.as_object_mut().expect("truth is an object");
            o.remove("pid");
            o.remove("ppid");
            v
        })
        .collect()
}

/// Lines vramtrace itself printed on stderr.
pub fn vramtrace_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains("vramtrace"))
        .map(str::to_string)
        .collect()
}

/// Names in a directory, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A small deterministic generator (xorshift64*): reproducible "random" mutations.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Fails with the process's stderr unless it exited with status 0.
pub fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
