//! Faults: scale, SIGKILL, unwritable outputs, hooks at the edges of a process's life,
//! and programs that look up their own symbols. Every check compares with what the
//! workload itself logged or counted, and every run has a deadline.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use support::{bare, listing, run_within, succeeded, traced, truths_without_pids, vramtrace_lines};
use vramtrace_schema::reader::TraceReader;
use vramtrace_schema::Api;
use vramtrace_tests::harness::{check, run_sim, same, trace_paths, vramtrace, workload, Trace};

const LIMIT: Duration = Duration::from_secs(120);

/// `threads N PAIRS`: streams the trace (memory stays flat at any size) and checks that
/// each of the N threads shows exactly its PAIRS pairs, in its own order: cudaMalloc of
/// 512 * (1 + i % 64) bytes, then cudaFree of that address - nothing lost, nothing twice.
fn every_event_exactly_once(threads: usize, pairs: u64) {
    let dir = tempfile::tempdir().unwrap();
    let pattern = format!("{}/", dir.path().display());
    let (t, p) = (threads.to_string(), pairs.to_string());
    let out = run_within(&mut traced("threads", &[&t, &p], &pattern), LIMIT * 10);
    succeeded(&out);
    let truth = &truths_without_pids(&out.stdout)[0];
    assert_eq!(truth["threads"], threads);
    for call in truth["calls"].as_array().unwrap() {
        assert_eq!(
            call["count"],
            threads as u64 * pairs,
            "workload's own count: {call}"
        );
        assert_eq!(call["failed"], 0);
    }

    let files = trace_paths(dir.path());
    assert_eq!(files.len(), 1);
    let mut reader = TraceReader::open(&files[0]).unwrap();
    // Per thread: pairs seen, and the block allocated and not yet freed.
    let mut per_thread: HashMap<u32, (u64, Option<(u64, u64)>)> = HashMap::new();
    let mut events = 0u64;
    while let Some(e) = reader.next_event().expect("a readable trace") {
        events += 1;
        let (done, open) = per_thread.entry(e.tid).or_default();
        assert_eq!(e.res, 0, "{e:?}");
        match (e.api, open.take()) {
            (Api::CudaMalloc, None) => {
                assert_eq!(
                    e.size,
                    512 * (1 + *done % 64),
                    "thread {}: pair {done}",
                    e.tid
                );
                *open = Some((e.addr, e.size));
            }
            (Api::CudaFree, Some((addr, _))) => {
                assert_eq!(
                    e.addr, addr,
                    "thread {}: pair {done} frees its block",
                    e.tid
                );
                *done += 1;
            }
            (api, open) => panic!(
                "thread {}: pair {done}: unexpected {api:?} (open block {open:?})",
                e.tid
            ),
        }
    }
    assert_eq!(per_thread.len(), threads, "threads in the trace");
    for (tid, (done, open)) in &per_thread {
        assert_eq!((*done, *open), (pairs, None), "thread {tid}");
    }
    assert_eq!(events, 2 * threads as u64 * pairs);
    let end = reader.notes.end.as_ref().expect("an end record");
    assert_eq!(end.events, events, "the end record counts what was written");
    assert_eq!(reader.notes.unknown_apis + reader.notes.unknown_records, 0);
}

/// 64 threads on 64 queue shards. The full size (64 x 200,000 pairs, 25.6M
/// events, 2.3 GB of trace) takes minutes in a debug build: the default suite runs
/// 64 x 5,000; `every_event_exactly_once_at_full_scale` below runs the full size.
#[test]
fn sixty_four_threads_every_event_exactly_once() {
    every_event_exactly_once(64, 5_000);
}

/// `cargo test --release -p vramtrace-tests --test faults -- --ignored`
#[test]
#[ignore = "25.6M events, 2.3 GB on disk: run it in release, see docs/benchmarks.md"]
fn every_event_exactly_once_at_full_scale() {
    every_event_exactly_once(64, 200_000);
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One call the `killed` workload logged before making it.
#[derive(Debug)]
struct Logged {
    api: String,
    /// size for cudaMalloc, address for cudaFree
    arg: u64,
    mono_ns: u64,
    /// address cudaMalloc returned, when the workload lived to log it
    got: Option<u64>,
}

fn parse_log(text: &str) -> Vec<Logged> {
    let mut calls: Vec<Logged> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["CALL", i, api, arg, t] => {
                assert_eq!(i.parse::<usize>().unwrap(), calls.len(), "log in order");
                calls.push(Logged {
                    api: api.to_string(),
                    arg: arg.parse().unwrap(),
                    mono_ns: t.parse().unwrap(),
                    got: None,
                });
            }
            ["GOT", i, addr] => {
                calls[i.parse::<usize>().unwrap()].got = Some(addr.parse().unwrap());
            }
            // the last line may be cut by the kill
            _ => assert!(
                !text.ends_with(&format!("{line}\n")),
                "odd log line {line:?}"
            ),
        }
    }
    calls
}

#[test]
fn sigkill_keeps_everything_up_to_the_last_flush_and_invents_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = format!("{}/", dir.path().display());
    let mut child = traced("killed", &[], &pattern)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let started = Instant::now();
    let mut log = String::new();
    // When each call was made, as the workload logged it.
    let mut made: Vec<u64> = Vec::new();
    // Let it run until 1,000 calls are over 1.2 s old (and at least 2 s), then kill -9: a
    // loaded machine can make most of its calls late, so a count alone is not enough.
    while started.elapsed() < Duration::from_secs(2)
        || made.get(999).is_none_or(|&t| t + 1_200_000_000 > mono_ns())
    {
        assert!(
            started.elapsed() < LIMIT,
            "the workload stalled: {log:.200}"
        );
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            panic!("the workload ended by itself: {log}");
        }
        if let ["CALL", _, _, _, t] = line.trim_end().split(' ').collect::<Vec<_>>().as_slice() {
            made.push(t.parse().unwrap());
        }
        log.push_str(&line);
    }
    let killed_at = mono_ns();
    child.kill().unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
    log.push_str(&rest);
    let calls = parse_log(&log);

    let files = trace_paths(dir.path());
    assert_eq!(files.len(), 1);
    let trace = Trace::read(&files[0]).unwrap();
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert!(
        trace.notes.end.is_none(),
        "a killed process writes no end record"
    );
    let raw = std::fs::read(&files[0]).unwrap();
    assert_eq!(
        trace.notes.truncated_line.is_some(),
        !raw.ends_with(b"\n"),
        "a cut last line is noticed exactly when there is one"
    );

    // Every event is a call the workload logged, in the same order: nothing invented.
    let events = &trace.events;
    assert!(
        events.len() <= calls.len(),
        "{} events, {} calls logged",
        events.len(),
        calls.len()
    );
    for (i, (e, c)) in events.iter().zip(&calls).enumerate() {
        assert_eq!(e.api.name(), c.api, "event {i}");
        assert_eq!(e.res, 0, "event {i}");
        match c.api.as_str() {
            "cudaMalloc" => {
                assert_eq!(e.size, c.arg, "event {i}: size");
                if let Some(addr) = c.got {
                    assert_eq!(e.addr, addr, "event {i}: address");
                }
            }
            _ => assert_eq!(e.addr, c.arg, "event {i}: address freed"),
        }
    }
    // Nothing older than ten flush intervals (100 ms each) is missing: the margin is for a
    // loaded machine, where the writer or the workload (between logging a call and making
    // it) can be kept off the CPU for a few hundred milliseconds beside 64 busy threads.
    let old = calls
        .iter()
        .filter(|c| c.mono_ns + 1_000_000_000 < killed_at)
        .count();
    assert!(old >= 1000, "the run lasted long enough to have old calls");
    assert!(
        events.len() >= old,
        "{} events, but {old} calls were made more than 1 s before the kill",
        events.len()
    );

    // A cut last line could not be read: exit status 1, the figures still given.
    let out = Command::new(vramtrace())
        .args(["summary", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let cut = !raw.ends_with(b"\n");
    assert_eq!(out.status.code(), Some(i32::from(cut)), "cut: {cut}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &summary["processes"][0];
    assert_eq!(p["complete"], false, "the analyzer says the trace was cut");
    assert_eq!(
        p["truncated"],
        !raw.ends_with(b"\n"),
        "from the file's last byte"
    );
    assert_eq!(p["events"], events.len());
}

/// Runs `runtime_dynamic` bare and with the output pattern `output`: same truth, same
/// exit status, exactly one vramtrace warning.
fn runs_on_with_one_warning(output: &str, as_nobody: bool) -> String {
    let mut plain = bare("runtime_dynamic", &[]);
    let mut with = traced("runtime_dynamic", &[], output);
    if as_nobody {
        for cmd in [&mut plain, &mut with] {
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(65534) != 0
                        || libc::setuid(65534) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
    }
    let expected = run_within(&mut plain, LIMIT);
    let got = run_within(&mut with, LIMIT);
    assert_eq!(got.status.code(), expected.status.code(), "exit status");
    assert_eq!(expected.status.code(), Some(0));
    assert_eq!(
        truths_without_pids(&got.stdout),
        truths_without_pids(&expected.stdout),
        "the workload's results"
    );
    assert_eq!(truths_without_pids(&got.stdout).len(), 1);
    let warnings = vramtrace_lines(&got.stderr);
    assert_eq!(warnings.len(), 1, "one warning: {warnings:?}");
    assert!(
        warnings[0].starts_with("vramtrace: warning:"),
        "{warnings:?}"
    );
    warnings[0].clone()
}

#[test]
fn output_to_dev_full_is_refused_with_one_warning() {
    let before = std::fs::metadata("/dev/full").unwrap();
    let warning = runs_on_with_one_warning("/dev/full", false);
    assert!(warning.contains("/dev/full"), "{warning}");
    let after = std::fs::metadata("/dev/full").unwrap();
    assert_eq!(before.rdev(), after.rdev(), "still the device");
}

#[test]
fn output_through_an_existing_symlink_is_refused_and_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious.txt");
    std::fs::write(&target, b"do not touch\n").unwrap();
    let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(&target)
        .unwrap()
        .set_modified(past)
        .unwrap();
    let link = dir.path().join("trace.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    // A dangling link too: O_CREAT without O_EXCL would create its target.
    let dangling = dir.path().join("dangling.jsonl");
    let nowhere = dir.path().join("created-through-link");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    let names = listing(dir.path());

    for path in [&link, &dangling] {
        let warning = runs_on_with_one_warning(&path.display().to_string(), false);
        assert!(warning.contains("symlink"), "{warning}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"do not touch\n");
    assert_eq!(
        std::fs::metadata(&target).unwrap().modified().unwrap(),
        past
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    assert!(!nowhere.exists(), "the dangling link was not followed");
    assert_eq!(listing(dir.path()), names, "no file was added");
}

/// A path whose parent is a regular file: creating it fails with ENOTDIR for any user,
/// root included (tests often run as root, which ignores directory permissions).
#[test]
fn output_under_a_regular_file_is_refused_with_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"content\n").unwrap();
    let pattern = format!("{}/sub/trace-%p.jsonl", file.display());
    let warning = runs_on_with_one_warning(&pattern, false);
    assert!(warning.contains("Not a directory"), "{warning}");
    assert_eq!(std::fs::read(&file).unwrap(), b"content\n");
    assert_eq!(listing(dir.path()), ["not-a-directory"]);
}

/// Whether user `nobody` can reach and run the built workloads (every directory above
/// them searchable by others).
fn nobody_can_run_workloads() -> bool {
    let exe = workload("runtime_dynamic");
    exe.ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0))
}

/// A directory without write permission. Root ignores permissions, so as root the
/// workload runs as user `nobody` (both runs, bare and traced), which is the case the
/// permission exists for.
#[test]
fn output_into_a_directory_without_write_permission_is_refused_with_one_warning() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        !root || nobody_can_run_workloads(),
        "as root this test runs the workload as `nobody`, who cannot reach {}: make the directories above it searchable (o+x)",
        workload("runtime_dynamic").display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let warning = runs_on_with_one_warning(&format!("{}/", locked.display()), root);
    assert!(warning.contains("Permission denied"), "{warning}");
    assert!(listing(&locked).is_empty());
}

/// Before cuInit, in threads as they start and exit (a pthread key destructor), in an
/// atexit handler: every call is recorded once, with its stack, nothing crashes or hangs.
#[test]
fn calls_before_init_in_exiting_threads_and_at_exit_are_recorded() {
    let run = run_sim("teardown", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("teardown");
    assert_eq!(truth["threads"], 9, "main and 8 workers made calls");
    check(&run, truth, same);
    let trace = run.trace_for(truth);
    let failed: Vec<_> = trace.events.iter().filter(|e| e.res != 0).collect();
    assert_eq!(failed.len(), 2, "the two calls made before cuInit");
    assert!(
        failed.iter().all(|e| e.res == 3),
        "CUDA_ERROR_NOT_INITIALIZED"
    );
    assert_eq!(
        trace.notes.end.as_ref().map(|e| e.reason.as_str()),
        Some("exit")
    );
    // Also those made after the thread's own destructors ran (key destructors, atexit).
    let bare: Vec<_> = trace.events.iter().filter(|e| e.stack == 0).collect();
    assert!(bare.is_empty(), "events without a stack: {bare:?}");
}

/// Four threads allocate and free while the main thread ends the process under them
/// (`exit`, then `_exit`): every call a thread logged as returned is in the trace, and
/// at most one more per thread (the call in flight when the process ended). Events
/// queued while the last flush ran were left in the queue, about half of them.
#[test]
fn calls_other_threads_make_while_the_process_ends_are_kept() {
    for how in ["exit", "_exit"] {
        let dir = tempfile::tempdir().unwrap();
        let pattern = format!("{}/", dir.path().display());
        let out = run_within(
            &mut traced("exit_busy", &["4", "20000", how], &pattern),
            LIMIT,
        );
        succeeded(&out);
        let mut logged: HashMap<(u32, String), u64> = HashMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let ["DONE", tid, api] = line.split(' ').collect::<Vec<_>>().as_slice() {
                *logged
                    .entry((tid.parse().unwrap(), api.to_string()))
                    .or_default() += 1;
            }
        }
        assert!(
            logged.values().sum::<u64>() >= 20000,
            "{how}: the workload's log"
        );
        let files = trace_paths(dir.path());
        assert_eq!(files.len(), 1);
        let mut reader = TraceReader::open(&files[0]).unwrap();
        let mut traced: HashMap<(u32, String), u64> = HashMap::new();
        while let Some(e) = reader.next_event().expect("a readable trace") {
            *traced.entry((e.tid, e.api.name().to_string())).or_default() += 1;
        }
        let reason = reader.notes.end.as_ref().map(|e| e.reason.as_str());
        if reason != Some(how) {
            let text = std::fs::read_to_string(&files[0]).unwrap();
            let ends: Vec<&str> = text.lines().filter(|l| l.starts_with("{\"end\"")).collect();
            panic!(
                "{how}: end reason {reason:?}; end records {ends:?}, stderr {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for (key, &n) in &logged {
            let got = traced.get(key).copied().unwrap_or(0);
            assert!(
                (n..=n + 1).contains(&got),
                "{how}: thread {} made {n} {} calls that returned, the trace has {got}",
                key.0,
                key.1
            );
        }
        let in_flight: u64 = traced
            .iter()
            .map(|(k, &n)| n - logged.get(k).copied().unwrap_or(0).min(n))
            .sum();
        assert!(
            in_flight <= 4,
            "{how}: {in_flight} calls traced but never logged"
        );
    }
}

/// Children started with vfork (Python's subprocess) close every descriptor and exec, or
/// fail to and `_exit`: the parent's trace goes on, complete, with its own end record.
#[test]
fn vfork_children_leave_the_parent_trace_alone() {
    let run = run_sim("vfork_exec", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.truth("vfork-exec");
    check(&run, truth, same);
    let trace = run.trace_for(truth);
    assert_eq!(
        trace.notes.end.as_ref().map(|e| e.reason.as_str()),
        Some("exit")
    );
    let ends = std::fs::read_to_string(&trace.path)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("{\"end\""))
        .count();
    assert_eq!(ends, 1, "one end record, the parent's own");
    assert_eq!(run.traces.len(), 1, "the children made no CUDA calls");
    assert!(!run.stderr().contains("warning"), "{}", run.stderr());
}

/// A process-directed signal goes to a thread that does not block it: always one of the
/// program's, never vramtrace's writer, which starts from a thread that takes it.
#[test]
fn signals_for_the_program_reach_only_its_own_threads() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = format!("{}/", dir.path().display());
    let out = run_within(&mut traced("signals", &["200"], &pattern), LIMIT);
    succeeded(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let takers: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("SIGNAL "))
        .collect();
    assert_eq!(takers.len(), 200, "every signal was handled: {stdout:.400}");
    let ours: Vec<_> = takers
        .iter()
        .filter(|t| t.starts_with("vramtrace"))
        .collect();
    assert!(
        ours.is_empty(),
        "{} signals ran on vramtrace's threads",
        ours.len()
    );
    assert_eq!(
        trace_paths(dir.path()).len(),
        1,
        "the worker's calls were traced"
    );
}

/// Threads allocating while the main thread forks 12 times; each child allocates and
/// ends (exit or _exit): every process has its own exact trace.
#[test]
fn fork_while_threads_allocate() {
    let run = run_sim("fork_threads", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.truths.len(), 13, "parent and 12 children");
    assert_eq!(run.traces.len(), 13, "one trace per process");
    let parent = run.truth("fork-threads");
    check(&run, parent, same);
    for child in run
        .truths
        .iter()
        .filter(|t| t["workload"] == "fork-threads-child")
    {
        check(&run, child, same);
        let trace = run.trace_for(child);
        assert_eq!(trace.header.ppid as u64, parent["pid"].as_u64().unwrap());
        let reason = trace.notes.end.as_ref().map(|e| e.reason.clone());
        assert!(
            matches!(reason.as_deref(), Some("exit" | "_exit")),
            "{reason:?}"
        );
    }
}

/// dlsym(RTLD_NEXT, ...) and dlsym(RTLD_DEFAULT, ...) made by libraries for their own
/// symbols give the same answers with and without vramtrace.
#[test]
fn own_symbol_lookups_get_the_same_answers() {
    let expected = run_within(&mut bare("own_symbols", &[]), LIMIT);
    succeeded(&expected);
    let dir = tempfile::tempdir().unwrap();
    let got = run_within(
        &mut traced("own_symbols", &[], &format!("{}/", dir.path().display())),
        LIMIT,
    );
    succeeded(&got);
    let expected = String::from_utf8(expected.stdout).unwrap();
    let got = String::from_utf8(got.stdout).unwrap();
    // The facts that make the comparison worth something.
    for line in [
        "a RTLD_NEXT vt_foo -> libvt_ownsym_b.so:vt_foo+0",
        "a RTLD_NEXT dlsym -> libc.so.6:dlsym+0",
        "c RTLD_DEFAULT vt_only_c -> libvt_ownsym_c.so:vt_only_c+0",
        "a next vt_foo() = 2",
    ] {
        assert!(expected.lines().any(|l| l == line), "bare run: {line}");
    }
    // The one expected difference: the default scope's `dlsym` is vramtrace's override,
    // as with any preloaded definition; RTLD_NEXT from a library never sees it.
    let normalize = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| {
                if l.contains(" RTLD_DEFAULT dlsym -> ") {
                    l.replace("libvramtrace.so:", "libc.so.6:")
                } else {
                    l.to_string()
                }
            })
            .collect()
    };
    assert_eq!(normalize(&got), normalize(&expected));
    assert!(got
        .lines()
        .filter(|l| l.contains("libvramtrace"))
        .all(|l| l.contains(" RTLD_DEFAULT dlsym -> ")));
    assert!(
        got.lines()
            .any(|l| l.contains(" RTLD_DEFAULT dlsym -> libvramtrace.so:")),
        "the override was there to be found: {got}"
    );
    assert!(
        listing(dir.path()).is_empty(),
        "no memory call, no trace file"
    );
}
