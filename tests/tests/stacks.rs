//! Call stacks: each allocation's stack names the functions that made it, in order, from
//! the trace file alone; identical stacks are written once; Python frames appear for
//! threads holding the GIL and for threads that released it.

use serde_json::Value;
use std::path::{Path, PathBuf};
use vramtrace_schema::{Event, Frame, StackTable};
use vramtrace_tests::harness::{
    check, python, run_sim, run_sim_command, same, script, Outcome, Trace,
};

/// The call chains the workload says it allocated from: (size, functions innermost first).
fn chains(run: &Outcome) -> Vec<(u64, Vec<String>)> {
    let printed = run.printed("VRAMTRACE_CHAINS ");
    printed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let functions = c["functions"].as_array().unwrap();
            let names = functions
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect();
            (c["size"].as_u64().unwrap(), names)
        })
        .collect()
}

fn allocations_of(trace: &Trace, size: u64) -> Vec<Event> {
    trace
        .events
        .iter()
        .filter(|e| e.api.name() == "cudaMalloc" && e.size == size)
        .copied()
        .collect()
}

fn frames(stacks: &StackTable, e: &Event) -> Vec<Frame> {
    stacks.frames(e.stack).into_iter().cloned().collect()
}

/// The function of each frame of `e`'s stack, innermost first ("" where unnamed).
fn function_names(stacks: &StackTable, e: &Event) -> Vec<String> {
    stacks
        .frames(e.stack)
        .into_iter()
        .map(|f| f.function.clone().unwrap_or_default())
        .collect()
}

#[test]
fn native_stacks_name_the_calling_functions_in_order() {
    let run = run_sim("callchain", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("callchain"), same);
    let trace = &run.traces[0];
    for (size, expected) in chains(&run) {
        let events = allocations_of(&run.traces[0], size);
        assert!(!events.is_empty(), "an allocation of {size}");
        for e in &events {
            let names: Vec<String> = function_names(&trace.stacks, e);
            assert_eq!(
                &names[..expected.len()],
                &expected[..],
                "stack of the {size}-byte allocation: {names:?}"
            );
            let leaf = &frames(&trace.stacks, e)[0];
            assert!(
                leaf.file
                    .as_deref()
                    .is_some_and(|f| f.ends_with("callchain.c")),
                "file and line from debug info: {leaf:?}"
            );
            assert!(leaf.line.is_some());
        }
    }
    // The two allocations made from one call site share one stack id.
    let first = allocations_of(&run.traces[0], (1 << 20) + 1);
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].stack, first[1].stack);
}

/// Thousands of calls through random chains of same-shaped functions: every stack names
/// exactly the chain the workload took, however much it shares with the calls before it.
#[test]
fn stacks_through_random_chains_name_each_call_exactly() {
    // The third run cuts stacks at 9 frames: shorter than many chains. The last two are
    // built with frame pointers: unwinding them uses bp.
    for (program, seed, depth) in [
        ("random_chains", "1", "64"),
        ("random_chains", "2", "64"),
        ("random_chains", "3", "9"),
        ("random_chains_fp", "4", "64"),
        ("random_chains_fp", "5", "9"),
    ] {
        let run = run_sim(program, &["3000", seed], &["--stack-depth", depth], &[]);
        assert!(run.output.status.success(), "{}", run.stderr());
        check(&run, run.truth("random-chains"), same);
        let chains = run.printed_all("VRAMTRACE_CHAIN ");
        assert!(chains.len() >= 2000, "{} calls", chains.len());
        let trace = &run.traces[0];
        let calls: Vec<&Event> = trace
            .events
            .iter()
            .filter(|e| matches!(e.api.name(), "cudaMalloc" | "cudaFree"))
            .collect();
        for (i, (chain, e)) in chains.iter().zip(&calls).enumerate() {
            let op = if e.api.name() == "cudaMalloc" {
                "alloc"
            } else {
                "free"
            };
            assert_eq!(chain["op"].as_str().unwrap(), op, "call {i}");
            if op == "alloc" {
                assert_eq!(chain["size"].as_u64().unwrap(), e.size, "call {i}");
            }
            let expected: Vec<&str> = chain["functions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            let names: Vec<String> = function_names(&trace.stacks, e);
            let want = expected.len().min(depth.parse().unwrap());
            assert!(names.len() >= want, "call {i} (seed {seed}): {names:?}");
            assert_eq!(&names[..want], &expected[..want], "call {i} (seed {seed})");
            if want < expected.len() {
                assert_eq!(names.len(), want, "call {i}: cut at the depth");
            }
        }
    }
}

/// Two libraries loaded, used and unloaded in turn, each where the other was: every
/// allocation names the function of the library that made it, not of the one that sat
/// at that address before.
#[test]
fn frames_of_unloaded_libraries_keep_their_own_names() {
    let run = run_sim("unload", &["40"], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("unload"), same);
    let expected: Vec<(u64, String)> = run
        .printed_all("VRAMTRACE_UNLOAD ")
        .iter()
        .map(|v| {
            (
                v["size"].as_u64().unwrap(),
                v["function"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(expected.len(), 40);
    let trace = &run.traces[0];
    for (size, function) in &expected {
        let events = allocations_of(&run.traces[0], *size);
        assert_eq!(events.len(), 1, "the {size}-byte allocation");
        let names: Vec<String> = function_names(&trace.stacks, &events[0]);
        assert_eq!(names.first(), Some(function), "{size} bytes: {names:?}");
        assert!(names.iter().any(|n| n == "main"), "{size} bytes: {names:?}");
    }
}

/// A process forked inside dlclose (a library destructor forks): after the dlclose returns,
/// parent and child both still record stacks, and each its own calls.
#[test]
fn a_fork_inside_dlclose_leaves_stacks_on_in_both_processes() {
    let run = run_sim("fork_in_unload", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    for name in ["fork-in-unload-parent", "fork-in-unload-child"] {
        let truth = run.truth(name);
        check(&run, truth, same);
        let trace = run.trace_for(truth);
        let size = truth["peak_live_bytes"]["0"].as_u64().unwrap();
        let e = allocations_of(trace, size);
        assert_eq!(e.len(), 1, "{name}'s allocation");
        let names = function_names(&trace.stacks, &e[0]);
        assert_eq!(
            names.first().map(String::as_str),
            Some("allocate_after_unload"),
            "{name}: {names:?}"
        );
    }
}

#[test]
fn stacks_off_records_the_same_events_and_no_stack() {
    let with = run_sim("callchain", &[], &[], &[]);
    let without = run_sim("callchain", &[], &["--no-stacks"], &[]);
    assert!(with.output.status.success(), "{}", with.stderr());
    assert!(without.output.status.success(), "{}", without.stderr());
    // The same events, and the ones the workload made.
    check(&without, without.truth("callchain"), same);
    let calls = |run: &Outcome| -> Vec<(String, u64, i32)> {
        run.traces[0]
            .events
            .iter()
            .map(|e| (e.api.name().to_string(), e.size, e.res))
            .collect()
    };
    assert_eq!(calls(&with), calls(&without));
    assert!(without.traces[0].events.iter().all(|e| e.stack == 0));
    let raw = std::fs::read_to_string(&without.traces[0].path).unwrap();
    assert!(
        !raw.contains("\"frame\"") && !raw.contains("\"node\""),
        "no stack records"
    );
    assert_eq!(without.traces[0].header.settings.stack_depth, 0);
}

#[test]
fn stack_depth_limits_the_frames() {
    let run = run_sim("callchain", &[], &["--stack-depth", "3"], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let trace = &run.traces[0];
    for e in &trace.events {
        assert!(trace.stacks.ips(e.stack).len() <= 3);
    }
    let deep = allocations_of(&run.traces[0], 3 * (1 << 20) + 3);
    let names: Vec<String> = function_names(&trace.stacks, &deep[0]);
    assert_eq!(names, ["chain_leaf", "chain_recurse", "chain_recurse"]);
}

/// Python frames for threads holding the GIL and for threads that released it (ctypes'
/// CDLL calls, on the main thread and another), the same as the traceback module sees,
/// and a frame that says why there are none on a thread that never ran Python;
/// and cut 3 frames below the interpreter, a stack keeps its native frames down to the
/// interpreter and then as many of the innermost Python frames as fit. With every CPython
/// this machine has: the system's python3, and the releases pyenv installed.
#[test]
fn python_frames_with_and_without_the_gil() {
    for py in pythons() {
        let native = python_frames_at_depth(&py, None);
        python_frames_at_depth(&py, Some(native + 3));
        eprintln!("Python frames checked with {}", py.display());
    }
}

/// The system's python3, then every CPython 3.9 or newer that pyenv installed.
fn pythons() -> Vec<PathBuf> {
    let mut found = vec![python()];
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    let Some(versions) = root.and_then(|r| std::fs::read_dir(r.join("versions")).ok()) else {
        return found;
    };
    let mut installed: Vec<(u32, PathBuf)> = versions
        .filter_map(|v| {
            let v = v.ok()?.path();
            let name = v.file_name()?.to_str()?.to_string();
            let minor: u32 = name.strip_prefix("3.")?.split('.').next()?.parse().ok()?;
            let exe = v.join("bin/python3");
            (minor >= 9 && exe.exists()).then_some((minor, exe))
        })
        .collect();
    installed.sort();
    found.extend(installed.into_iter().map(|(_, exe)| exe));
    found
}

/// Checks each allocation's Python frames; returns the most native frames that came
/// before them.
fn python_frames_at_depth(py: &Path, depth: Option<usize>) -> usize {
    let file = script("python_ctypes.py");
    let depth_arg = depth.map(|d| d.to_string()).unwrap_or_default();
    let vt_args: &[&str] = match depth {
        Some(_) => &["--stack-depth", &depth_arg],
        None => &[],
    };
    let run = run_sim_command(&[py.as_os_str(), file.as_os_str()], vt_args, &[]);
    let who = py.display();
    assert!(run.output.status.success(), "{who}: {}", run.stderr());
    assert!(!run.stderr().contains("warning"), "{who}: {}", run.stderr());
    let truth = run.truth("python-ctypes");
    check(&run, truth, same);
    let trace = run.trace_for(truth);
    let records = run.printed("VRAMTRACE_PYFRAMES ");
    let mut most_native = 0;
    let mut without_gil = 0;
    for r in records.as_array().unwrap() {
        let size = r["size"].as_u64().unwrap();
        let e = trace
            .events
            .iter()
            .find(|e| e.api.name() == "cudaMalloc" && e.size == size)
            .expect("the allocation");
        let stack = frames(&trace.stacks, e);
        if r["own_thread"].as_bool() == Some(true) {
            // A thread that never ran Python: its stack says why it has no Python frames.
            let python: Vec<&Frame> = stack.iter().filter(|f| f.module == "<python>").collect();
            if depth.is_none() {
                assert_eq!(python.len(), 1, "{who}: {stack:?}");
                assert_eq!(stack.last().unwrap().module, "<python>");
                let says = python[0].function.as_deref().unwrap_or_default();
                assert!(says.contains("no Python frames"), "{who}: {says}");
            }
            assert!(python.len() <= 1, "{who}: {stack:?}");
            continue;
        }
        let python: Vec<(String, u32, String)> = stack
            .iter()
            .filter(|f| f.module == "<python>")
            .map(|f| {
                (
                    f.file.clone().unwrap_or_default(),
                    f.line.unwrap_or(0),
                    f.function.clone().unwrap_or_default(),
                )
            })
            .collect();
        let expected: Vec<(String, u32, String)> = r["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f[0].as_str().unwrap().to_string(),
                    f[1].as_u64().unwrap() as u32,
                    f[2].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert!(expected.len() >= 4, "{who}: the script's own stack");
        let native = stack
            .iter()
            .position(|f| f.module == "<python>")
            .unwrap_or_else(|| panic!("{who}: Python frames for {size} bytes: {stack:?}"));
        most_native = most_native.max(native);
        let expected = match depth {
            Some(d) => {
                assert_eq!(stack.len(), d, "{who}: a full stack: {stack:?}");
                &expected[..(d - native).min(expected.len())]
            }
            None => &expected[..],
        };
        let gil = r["gil"].as_bool().unwrap();
        without_gil += usize::from(!gil);
        assert_eq!(
            python, expected,
            "{who}: Python frames of the {size}-byte allocation (GIL held: {gil})"
        );
        // Native frames of the call into the runtime come first, above Python.
        assert!(stack[0].module != "<python>");
    }
    assert_eq!(without_gil, 2, "{who}: two allocations without the GIL");
    most_native
}

#[test]
fn views_name_the_frames_of_each_group() {
    let run = run_sim("callchain", &[], &[], &[]);
    let peak: Value = serde_json::from_str(&run.view(&["peak", "--json"])).unwrap();
    let groups = peak["devices"][0]["groups"].as_array().unwrap();
    for (size, expected) in chains(&run) {
        // At the peak every block is live: the group of this chain holds its blocks.
        let blocks = if size == (1 << 20) + 1 { 2 } else { 1 };
        let names_of = |g: &Value| -> Vec<String> {
            g["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["function"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let g = groups
            .iter()
            .find(|g| {
                names_of(g).len() >= expected.len() && names_of(g)[..expected.len()] == expected[..]
            })
            .unwrap_or_else(|| panic!("a group with frames {expected:?} in {groups:?}"));
        assert_eq!(
            g["bytes"].as_u64(),
            Some(size * blocks),
            "bytes of the group {expected:?}"
        );
        assert_eq!(g["blocks"].as_u64(), Some(blocks));
        assert!(g["frames"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("callchain.c"));
        assert!(g["frames"][0]["line"].as_u64().is_some());
    }
}

#[test]
fn flamegraph_of_the_peak_folds_the_call_chains() {
    let run = run_sim("callchain", &[], &[], &[]);
    let folded = run.view(&["flamegraph", "--folded", "-o", "-"]);
    let line = folded
        .lines()
        .find(|l| l.contains("chain_mid_b"))
        .unwrap_or_else(|| panic!("a folded line through chain_mid_b: {folded}"));
    let (stack, bytes) = line.rsplit_once(' ').unwrap();
    assert_eq!(bytes.parse::<u64>().unwrap(), 2 * (1 << 20) + 2);
    let names: Vec<&str> = stack
        .split(';')
        .map(|f| f.split(' ').next().unwrap())
        .collect();
    // pid first, then outermost to innermost, then the API.
    assert!(names[0] == "pid");
    assert_eq!(
        &names[names.len() - 5..],
        [
            "main",
            "chain_root",
            "chain_mid_b",
            "chain_leaf",
            "cudaMalloc"
        ]
    );
    let svg_path = run.dir.path().join("peak.svg");
    run.view(&["flamegraph", "-o", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(
        svg.starts_with("<?xml")
            && svg.contains("chain_mid_b")
            && svg.trim_end().ends_with("</svg>")
    );
}
