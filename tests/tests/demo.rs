//! `scripts/demo.sh` as a newcomer sees it: its own commands, run as it runs them, print
//! no line meant for the tests, and the summary's first lines say that the run ran out of
//! memory, how much the failed call asked for and who held the memory then - checked
//! against what the demo itself counted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use vramtrace_tests::harness::{bin_dir, clean_env, run_sim, run_within};
use vramtrace_tests::truth;

const LIMIT: Duration = Duration::from_secs(300);
const GIB: f64 = (1u64 << 30) as f64;

/// The `vramtrace` commands of scripts/demo.sh, in order, each as its arguments (the
/// script's `|| true` left out): the test runs what the script runs, so the two cannot
/// drift apart. `target/release/X` is the build under test's `X`, `demo-traces` is `dir`.
fn demo_commands(dir: &Path) -> Vec<Vec<PathBuf>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo.sh");
    let text = std::fs::read_to_string(&script).expect("scripts/demo.sh is readable");
    text.lines()
        .filter_map(|l| l.strip_prefix("target/release/vramtrace "))
        .map(|l| {
            let command = l.split(" || ").next().unwrap_or(l);
            command
                .split_whitespace()
                .map(|arg| match arg {
                    "demo-traces" => dir.to_path_buf(),
                    _ => match arg.strip_prefix("target/release/") {
                        Some(built) => bin_dir().join(built),
                        None => PathBuf::from(arg),
                    },
                })
                .collect()
        })
        .collect()
}

/// Sizes as vramtrace's text writes them: binary units, one decimal.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

#[test]
fn the_demo_says_out_of_memory_first_and_who_held_it() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("demo-traces");
    let commands = demo_commands(&traces);
    assert_eq!(
        commands.len(),
        2,
        "scripts/demo.sh runs the demo, then its summary"
    );
    assert_eq!(commands[0][0], Path::new("run"), "{commands:?}");
    assert_eq!(commands[1][0], Path::new("summary"), "{commands:?}");

    // As the user runs it: no variable of the tests', so no ground truth asked for.
    let mut seen = String::new();
    let mut summary = String::new();
    for (i, args) in commands.iter().enumerate() {
        let mut cmd = Command::new(vramtrace_tests::harness::vramtrace());
        clean_env(&mut cmd).env_remove(truth::ENV).args(args);
        let out = run_within(&mut cmd, LIMIT);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        seen.push_str(&stdout);
        seen.push_str(&String::from_utf8_lossy(&out.stderr));
        if i == 1 {
            assert!(out.status.success(), "{seen}");
            summary = stdout;
        }
    }
    assert!(
        !seen.contains(truth::PREFIX.trim()),
        "a line meant for the tests reached the demo's user:\n{seen}"
    );

    // The same demo on the same card, asking for its truth: its sizes follow the card's
    // capacity alone (tests/workloads/demo.c), so it fails the same way.
    let run = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    let truth = run.truth("demo");
    let malloc = truth["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["api"] == "cudaMalloc")
        .expect("the demo counts its cudaMalloc calls");
    assert_eq!(malloc["failed"], 1, "{truth}");
    let asked = malloc["failed_bytes"].as_u64().unwrap();
    // It exits right after the failure without freeing: what it held at its end it held
    // when the call failed.
    let held = truth["live_bytes_at_end"]["0"].as_u64().unwrap();

    let lines: Vec<&str> = summary.lines().collect();
    let first = lines.first().copied().unwrap_or_default();
    assert!(
        first.starts_with("Out of memory: cudaMalloc of "),
        "{summary}"
    );
    assert!(
        first.contains(&format!("of {} failed on GPU 0", gib(asked))),
        "{summary}"
    );
    assert!(
        first.contains(&format!("held {} reserved", gib(held))),
        "{summary}"
    );
    // Who held it: the largest holder first, the activations the demo's failing step had
    // taken (six of them, against one of each piece of model state), then the model state.
    assert!(lines[1].contains("held at the failure"), "{summary}");
    assert!(lines[2].contains("forward_activations"), "{summary}");
    let holders = lines[2..7].join("\n");
    for site in [
        "alloc_parameters",
        "alloc_gradients",
        "alloc_optimizer_state",
    ] {
        assert!(
            holders.contains(site),
            "{site} among the holders:\n{summary}"
        );
    }
    // Then the peak and the leaks, each once, before the details.
    let verdict = &lines[..lines.iter().position(|l| l.is_empty()).unwrap()];
    assert!(
        verdict.iter().any(|l| l.starts_with("The peak: ")),
        "{summary}"
    );
    assert!(
        verdict.last().unwrap().starts_with("Nothing leaked"),
        "{summary}"
    );

    // A figure "at the end" read as a contradiction: the GPU's after its processes exited
    // beside the process's when it ended. Each says its moment.
    assert!(!summary.contains(" at the end"), "{summary}");

    // The exact bytes, where the JSON has them.
    let json = vramtrace_tests::harness::summary_of(&traces);
    assert_eq!(
        json["processes"][0]["failures"][0]["requested_bytes"],
        asked
    );
}
