//! The host process comes first: programs written to break a tracer (an environment
//! changed under it, descriptors closed under it, crashes, exits and execs by every
//! entry point, a program faster than the writer, a full disk) end exactly as they would
//! untraced, and their traces hold what they did or say what is missing. Every check
//! compares with what the workload itself printed or counted.

mod support;

use std::time::Duration;
use support::{listing, run_within, succeeded, traced};
use vramtrace_tests::harness::{expected_calls, finish, same, Outcome};

const LIMIT: Duration = Duration::from_secs(120);

/// Runs a traced workload into a fresh directory and collects its truths and traces.
fn run_traced(name: &str, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = traced(name, args, &format!("{}/", dir.path().display()));
    for (k, v) in env {
        cmd.env(k, v);
    }
    finish(run_within(&mut cmd, LIMIT), dir)
}

/// Every process that printed a truth has a trace with exactly its calls and an end record.
fn each_truth_traced(out: &Outcome, workload: &str) -> usize {
    let truths: Vec<_> = out
        .truths
        .iter()
        .filter(|t| t["workload"] == workload)
        .collect();
    for truth in &truths {
        let trace = out.trace_for(truth);
        assert!(trace.error.is_none(), "{:?}", trace.error);
        assert_eq!(trace.calls(), expected_calls(truth, same), "{truth}");
        assert!(
            trace.notes.end.is_some(),
            "{}: no end record",
            trace.path.display()
        );
    }
    truths.len()
}

/// `RANK=../../x` in `%r` stays part of one file name inside the output directory.
#[test]
fn rank_and_host_cannot_leave_the_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let deeper = dir.path().join("inner/deeper");
    let pattern = format!("{}/%r-%p.jsonl", deeper.display());
    let mut cmd = traced("runtime_dynamic", &[], &pattern);
    cmd.env("RANK", "../../x");
    let out = run_within(&mut cmd, LIMIT);
    succeeded(&out);
    assert_eq!(listing(dir.path()), ["inner"], "nothing beside the output");
    let names = listing(&deeper);
    assert_eq!(names.len(), 1, "{names:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let truth: serde_json::Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix(vramtrace_tests::truth::PREFIX))
        .map(|j| serde_json::from_str(j).unwrap())
        .expect("a truth line");
    let pid = &truth["pid"];
    assert_eq!(names[0], format!("______x-{pid}.jsonl"));
    let trace = vramtrace_tests::harness::Trace::read(&deeper.join(&names[0])).unwrap();
    assert_eq!(trace.header.env["RANK"], "../../x", "recorded as it was");
}

/// Threads that change the environment without pause while the process allocates: no
/// child crashes, and each header says what RANK was when the library loaded.
#[test]
fn an_environment_changed_under_the_writer() {
    let children = 40;
    let out = run_traced(
        "env_race",
        &[&children.to_string()],
        &[("RANK", "5"), ("VRAMTRACE_FLUSH_MS", "1")],
    );
    let line = out.printed("ENV_RACE ");
    assert_eq!(
        line["ok"],
        children,
        "children that exited 0: {}",
        out.stderr()
    );
    succeeded(&out.output);
    assert_eq!(each_truth_traced(&out, "env-race-child"), children);
    assert_eq!(out.traces.len(), children);
    for trace in &out.traces {
        assert_eq!(
            trace.header.env.get("RANK").map(String::as_str),
            Some("5"),
            "{}",
            trace.path.display()
        );
    }
}
