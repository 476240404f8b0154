//! A process's memory leaves the run's totals when the process ends: jobs run one after
//! another on a card, and the images of an exec chain, are never summed as if they had
//! run at once. Checked against what each process printed it held.

use serde_json::Value;
use std::process::Command;
use vramtrace_tests::harness::{clean_env, run_within, summary_of, vramtrace, workload};

const GIB: u64 = 1 << 30;

/// Runs `hold ARGS` traced on a simulated 40-GiB card into `dir`; the truths it printed.
/// Every call is one run (one launcher job id), as the processes of one job would be:
/// separate `vramtrace run`s would be separate runs, shown one at a time.
fn hold(dir: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .env("TORCHELASTIC_RUN_ID", "one-job")
        .args(["run", "--sim", "--sim-capacity", "40GiB", "-o"])
        .arg(dir)
        .arg("--")
        .arg(workload("hold"))
        .args(args);
    let out = run_within(&mut cmd, std::time::Duration::from_secs(300));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("VRAMTRACE_TRUTH "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect()
}

/// Each process's peak (by pid and order) as the summary has it, against its truth; and
/// the run device's peak and end.
fn check(dir: &std::path::Path, truths: &[Value], images: usize) -> Value {
    assert_eq!(truths.len(), images);
    let summary = summary_of(dir);
    let processes = summary["processes"].as_array().unwrap();
    assert_eq!(processes.len(), images);
    let mut peaks: Vec<u64> = processes
        .iter()
        .map(|p| p["devices"][0]["peak_reserved_bytes"].as_u64().unwrap())
        .collect();
    let mut truth_peaks: Vec<u64> = truths
        .iter()
        .map(|t| t["peak_live_bytes"]["0"].as_u64().unwrap())
        .collect();
    peaks.sort_unstable();
    truth_peaks.sort_unstable();
    assert_eq!(peaks, truth_peaks);
    summary
}

#[test]
fn jobs_run_one_after_another_are_not_summed() {
    let dir = tempfile::tempdir().unwrap();
    let mut truths = Vec::new();
    for _ in 0..3 {
        truths.extend(hold(dir.path(), &["30"]));
    }
    let summary = check(dir.path(), &truths, 3);
    let gpu = &summary["devices"][0];
    // Each job held 30 GiB of the 40-GiB card, one at a time: the card never held 90.
    let most = truths
        .iter()
        .map(|t| t["peak_live_bytes"]["0"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(most, 30 * GIB);
    assert_eq!(gpu["peak_reserved_bytes"], most, "{gpu}");
    // Every job ended: nothing is held at the end, though each left its 30 GiB behind.
    assert_eq!(gpu["reserved_bytes_at_end"], 0, "{gpu}");
    for p in summary["processes"].as_array().unwrap() {
        assert_eq!(p["devices"][0]["reserved_bytes_at_end"], 30 * GIB, "{p}");
    }
}

#[test]
fn an_exec_chain_is_not_summed() {
    let dir = tempfile::tempdir().unwrap();
    // 7 images, each taking 5 GiB: the driver frees an image's memory at its exec.
    let truths = hold(dir.path(), &["5", "6"]);
    let summary = check(dir.path(), &truths, 7);
    let gpu = &summary["devices"][0];
    assert_eq!(gpu["peak_reserved_bytes"], 5 * GIB, "{gpu}");
    assert_eq!(gpu["reserved_bytes_at_end"], 0, "{gpu}");
}
