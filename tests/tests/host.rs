//! The host process comes first: programs written to break a tracer (an environment
//! changed under it, descriptors closed under it, crashes, exits and execs by every
//! entry point, a program faster than the writer, a full disk) end exactly as they would
//! untraced, and their traces hold what they did or say what is missing. Every check
//! compares with what the workload itself printed or counted.

mod support;

use std::path::Path;
use std::process::Command;
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

/// The one trace of a run that printed one truth, with its end record's reason.
fn end_reason(out: &Outcome, workload: &str) -> String {
    let trace = out.trace_for(out.truth(workload));
    let end = trace.notes.end.as_ref().unwrap_or_else(|| {
        panic!(
            "{}: no end record; stderr: {}",
            trace.path.display(),
            out.stderr()
        )
    });
    assert_eq!(
        end.events,
        trace.events.len() as u64,
        "the end counts the events"
    );
    end.reason.clone()
}

/// A crash right after the first allocations, long before the first periodic flush,
/// still leaves the trace, with every event and an end record naming the signal.
#[test]
fn a_crash_in_the_first_flush_interval_leaves_a_trace() {
    for (arg, signal) in [("segv", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
        let out = run_traced("crash_early", &[arg], &[]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.output.status.signal(),
            Some(signal),
            "{arg}: dies as untraced"
        );
        assert_eq!(each_truth_traced(&out, "crash-early"), 1, "{arg}");
        assert_eq!(end_reason(&out, "crash-early"), format!("signal {signal}"));
    }
}

/// `main` ends with `pthread_exit`: the process ends when its last thread does, with
/// status 0 (glibc's `exit(0)`, which prints the truth), and the trace is complete.
#[test]
fn the_process_ends_with_its_last_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = traced(
        "main_exit",
        &["4", "200"],
        &format!("{}/", dir.path().display()),
    );
    let out = finish(run_within(&mut cmd, Duration::from_secs(30)), dir);
    succeeded(&out.output);
    assert_eq!(each_truth_traced(&out, "main-exit"), 1);
    assert_eq!(end_reason(&out, "main-exit"), "exit");
    // The process's /proc/PID/cmdline is empty, and its exe link unreadable, once `main`
    // has ended: the header still names the command.
    let header = &out.trace_for(out.truth("main-exit")).header;
    assert_eq!(header.argv[1..], ["4", "200"], "{:?}", header.argv);
    assert!(header.exe.ends_with("/main_exit"), "{}", header.exe);
}

/// The same in a pid namespace whose `/proc` is its parent's (`unshare --pid --fork`
/// without `--mount-proc`): there `gettid()` is not the number `/proc` lists a thread
/// under, and vramtrace's threads, counted as the program's, kept the process alive.
#[test]
fn the_process_ends_with_its_last_thread_where_proc_is_another_namespaces() {
    let unshare = |cmd: &Command| {
        let mut wrapped = Command::new("unshare");
        wrapped
            // A user namespace too: where user namespaces are allowed, no privilege is
            // needed, so the test runs as an ordinary user.
            .args([
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--kill-child",
            ])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (key, value) in cmd.get_envs() {
            match value {
                Some(v) => wrapped.env(key, v),
                None => wrapped.env_remove(key),
            };
        }
        wrapped
    };
    if !unshare(&Command::new("true"))
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("skipped: this machine does not let unshare make a pid namespace");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cmd = traced(
        "main_exit",
        &["4", "200"],
        &format!("{}/", dir.path().display()),
    );
    let out = finish(run_within(&mut unshare(&cmd), Duration::from_secs(30)), dir);
    succeeded(&out.output);
    assert_eq!(each_truth_traced(&out, "main-exit"), 1);
    assert_eq!(end_reason(&out, "main-exit"), "exit");
}

/// Every exec and exit entry point glibc exports: the image's events are all written,
/// with an end record, and an exec'd program writes its own trace.
#[test]
fn every_exec_and_exit_entry_point_ends_the_trace() {
    let cases = [
        ("execl", "exec"),
        ("execlp", "exec"),
        ("execle", "exec"),
        ("fexecve", "exec"),
        ("execveat", "exec"),
        ("exit", "exit"),
        ("_exit", "_exit"),
        ("_Exit", "_exit"),
        ("quick_exit", "_exit"),
    ];
    for (how, reason) in cases {
        let out = run_traced("exec_variants", &[how], &[]);
        succeeded(&out.output);
        assert_eq!(each_truth_traced(&out, "exec-variants"), 1, "{how}");
        assert_eq!(end_reason(&out, "exec-variants"), reason, "{how}");
        if reason == "exec" {
            assert_eq!(each_truth_traced(&out, "runtime-dynamic"), 1, "{how}");
        }
    }
}

/// The program closes every descriptor and opens its own log (which gets the trace's
/// old number), or `dup2`s its log onto every descriptor: its log holds only its own
/// lines, and the trace every call and an end record.
#[test]
fn descriptors_taken_back_by_the_program() {
    for how in ["close_range", "dup2"] {
        let logs = tempfile::tempdir().unwrap();
        let log = logs.path().join("own.log");
        let out = run_traced(
            "fd_reuse",
            &[how, log.to_str().unwrap()],
            &[("VRAMTRACE_FLUSH_MS", "1")],
        );
        succeeded(&out.output);
        let text = std::fs::read_to_string(&log).unwrap();
        let foreign: Vec<&str> = text.lines().filter(|l| !l.starts_with("LOG ")).collect();
        assert_eq!(
            foreign[..foreign.len().min(3)],
            [""; 0],
            "{how}: in the program's log"
        );
        let expected: String = (0..20).map(|i| format!("LOG {i}\n")).collect();
        assert_eq!(text, expected, "{how}: the program's log is its own");
        assert_eq!(each_truth_traced(&out, "fd-reuse"), 1, "{how}");
        assert_eq!(end_reason(&out, "fd-reuse"), "exit", "{how}");
    }
}

/// A program that closes every descriptor from 3 up, opens its log (it gets 3) and writes,
/// over and over, while vramtrace's writer reads `/proc/self/stat` often: the writer once
/// held 3 for a moment, the program's `close_range` closed it, the program's log got 3,
/// and the writer's close of "its" file closed the program's log (a write failed with
/// EBADF), or the program closed the writer's listing of `/proc/self/task` and the
/// writer thread panicked in `closedir`. vramtrace's transient files are now opened
/// outside the program's descriptor table.
#[test]
fn transient_reads_never_close_the_programs_descriptors() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("own.log");
    let out = run_traced(
        "fd_reuse",
        &["churn", log.to_str().unwrap(), "4000"],
        &[
            ("VRAMTRACE_FLUSH_MS", "1"),
            ("VRAMTRACE_THREAD_CHECK_MS", "0"),
            // The symbolizer opens ELF files in the program's table (docs/host.md).
            ("VRAMTRACE_STACKS", "0"),
        ],
    );
    succeeded(&out.output);
    // Nothing on stderr: the old writer also died of its own listing's descriptor closed
    // under it (std's `closedir` panics on EBADF), and stopped checking.
    assert_eq!(String::from_utf8_lossy(&out.output.stderr), "");
    let stdout = String::from_utf8_lossy(&out.output.stdout);
    let lines: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("LINES "))
        .and_then(|n| n.parse().ok())
        .expect("the workload counts its lines");
    let expected: String = (0..lines).map(|i| format!("LOG {i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), expected);
    assert_eq!(each_truth_traced(&out, "fd-reuse"), 1);
}

/// A disk that fills up (simulated by a file size limit, with SIGXFSZ ignored as a
/// program may: writes then fail with EFBIG, as with ENOSPC): the program runs on
/// unharmed, and the trace ends with whole lines and an end record that says why, which
/// the summary shows instead of calling the process killed.
#[test]
fn a_full_disk_is_named_in_the_trace() {
    use std::os::unix::process::CommandExt;
    const LIMIT_BYTES: u64 = 64 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = traced(
        "threads",
        &["4", "2000"],
        &format!("{}/", dir.path().display()),
    );
    // SAFETY: setrlimit and signal are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT_BYTES,
                rlim_max: LIMIT_BYTES,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = finish(run_within(&mut cmd, LIMIT), dir);
    succeeded(&out.output);
    let truth = out.truth("threads");
    let calls: u64 = expected_calls(truth, same).values().map(|c| c.count).sum();
    assert_eq!(calls, 16_000, "the program made all its calls");
    let trace = out.trace_for(truth);
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(trace.notes.truncated_line, None, "ends with a whole line");
    let size = std::fs::metadata(&trace.path).unwrap().len();
    assert!(size <= LIMIT_BYTES, "{size}");
    let reason = end_reason(&out, "threads");
    assert_eq!(reason, "write failed: file size limit reached");
    assert!((trace.events.len() as u64) < calls);

    let summary = out.summary();
    let process = &summary["processes"][0];
    assert_eq!(process["complete"], false);
    assert_eq!(process["cut_by"], reason);
    let text = out.view(&["summary"]);
    assert!(
        text.contains("(trace cut: write failed: file size limit reached; the process went on)"),
        "{text}"
    );
}

/// A program that calls faster than the writer writes, under a 1 MiB queue bound: every
/// call is still recorded exactly once (the hooks wait for a writer that makes progress),
/// and the queue never held more than the bound (and one chunk of slack per shard).
#[test]
fn a_program_faster_than_the_writer_is_held_to_the_bound() {
    let out = run_traced("threads", &["8", "20000"], &[("VRAMTRACE_QUEUE_MB", "1")]);
    succeeded(&out.output);
    let truth = out.truth("threads");
    let trace = out.trace_for(truth);
    let made: u64 = expected_calls(truth, same).values().map(|c| c.count).sum();
    let recorded = trace.program_calls().count() as u64;
    assert_eq!(
        (recorded + trace.notes.lost_calls, made),
        (made, 320_000),
        "recorded {recorded} + not recorded {}",
        trace.notes.lost_calls
    );
    let end = trace.notes.end.as_ref().unwrap();
    let peak = end
        .queue_peak_bytes
        .expect("the end record has the queue's peak");
    // 64 shards, each adding to the total by 4 KiB (1 MiB / 256) at a time.
    let slack = 64 * 4096;
    assert!(peak <= (1 << 20) + slack, "queue peak {peak} bytes");
    assert_eq!(out.summary()["processes"][0]["calls_not_recorded"], 0);
}

/// `lost` records are added up by the reader, and the summary shows the count.
#[test]
fn calls_not_recorded_are_shown() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"format":"vramtrace","version":1,"pid":7,"ppid":1,"host":"h","argv":["a"],"exe":"/a","start_unix_ns":1,"start_mono_ns":1,"env":{},"settings":{"output":"o","children":true,"flush_ms":100,"stack_depth":0,"python":false},"interposer":"0"}"#;
    let lines = [
        header,
        r#"{"t":10,"tid":7,"dev":0,"api":"cudaMalloc","res":0,"addr":4096,"size":4096}"#,
        r#"{"lost":{"t":20,"calls":1200}}"#,
        r#"{"t":30,"tid":7,"dev":0,"api":"cudaFree","res":0,"addr":4096}"#,
        r#"{"lost":{"t":40,"calls":34}}"#,
        r#"{"end":{"t":50,"events":2,"reason":"exit","queue_peak_bytes":1048576}}"#,
    ];
    std::fs::write(dir.path().join("t.jsonl"), lines.join("\n") + "\n").unwrap();
    let summary = vramtrace_tests::harness::summary_of(dir.path());
    assert_eq!(summary["processes"][0]["calls_not_recorded"], 1234);
    let out = std::process::Command::new(vramtrace_tests::harness::vramtrace())
        .arg("summary")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1234 calls not recorded"), "{text}");
}

/// After the program closed the trace's descriptor, someone replaces the trace file: with
/// a symlink to a file they want written, or with a file of their own. The trace is never
/// opened through the link nor continued in the other file: both stay as they were, and
/// vramtrace says once that it stopped.
#[test]
fn a_replaced_trace_file_is_not_reopened() {
    for target in ["victim", "-"] {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "VICTIM\n").unwrap();
        let log = dir.path().join("own.log");
        let planted = if target == "-" {
            "-"
        } else {
            victim.to_str().unwrap()
        };
        let mut cmd = traced(
            "fd_reuse",
            &[
                "close_range",
                log.to_str().unwrap(),
                out_dir.to_str().unwrap(),
                planted,
            ],
            &format!("{}/", out_dir.display()),
        );
        cmd.env("VRAMTRACE_FLUSH_MS", "1");
        let out = run_within(&mut cmd, LIMIT);
        succeeded(&out);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "VICTIM\n",
            "{target}"
        );
        let names = listing(&out_dir);
        assert_eq!(names.len(), 2, "{names:?}");
        let name = &names[0];
        let replaced = out_dir.join(name);
        if target == "-" {
            assert_eq!(std::fs::read_to_string(&replaced).unwrap(), "PLANTED\n");
        } else {
            assert!(std::fs::symlink_metadata(&replaced).unwrap().is_symlink());
        }
        let moved = vramtrace_tests::harness::Trace::read(&out_dir.join(&names[1])).unwrap();
        // What was written before the close: some or all of the five pairs made before it.
        assert!(
            (1..=10).contains(&moved.events.len()),
            "{}",
            moved.events.len()
        );
        assert!(
            moved.notes.end.is_none(),
            "nothing written after the replacement"
        );
        let warnings = support::vramtrace_lines(&out.stderr);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }
}

/// The PyTorch hook puts its files beside the traces, so it fills `%h` and `%r` as the
/// interposer does (the names the interposer's own unit test expects).
#[test]
fn the_pytorch_hook_fills_rank_and_host_as_the_interposer_does() {
    let hook = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../analyzer/python/vramtrace_torch/sitecustomize.py");
    let script = format!(
        "import importlib.util as u\n\
         spec = u.spec_from_file_location('hook', {hook:?})\n\
         m = u.module_from_spec(spec)\n\
         spec.loader.exec_module(m)\n\
         for v in ['../../x', 'h/../x', '..', '...', 'a\\nb\\x1b', '', 'rank-3.a']:\n\
         \x20   print(m._vramtrace_sanitized(v))\n"
    );
    let out = std::process::Command::new(vramtrace_tests::harness::python())
        .args(["-c", &script])
        .env("VRAMTRACE_TORCH", "0")
        .output()
        .unwrap();
    succeeded(&out);
    let names: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(
        names,
        ["______x", "h____x", "__", "__.", "a_b_", "_", "rank-3.a"]
    );
}
