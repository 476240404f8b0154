//! Every shell line of the README and the user guide, run as a reader would run it, in a
//! directory holding what the lines name: `traces/` (the demo, run as scripts/demo.sh
//! runs it; `demo-traces/` the same), `last-run/` (the demo on a larger card), `snapshot.pickle`, `a.pickle`,
//! `b.pickle` and `snapshots/` (PyTorch snapshots that vramtrace wrote of those runs),
//! `run.vtpack`, `train.py` (a Python program that allocates through the runtime),
//! `./my_cuda_program` (a C workload) and `target/release/` (the build under test).
//!
//! There is no GPU here, so `vramtrace run` gets `--sim` and every line finds the
//! simulated CUDA stack on the library path, as a GPU machine has NVIDIA's. A line fails
//! when it exits with another status than the one it should (0, or 1 where the line
//! asks for a verdict that the demo breaks) or leaves no output where it names one.
//! Lines that need what a test machine has not (a launcher, PyPI) are listed in
//! [`NOT_RUN`] with why; a listed line that no page has any more fails the test too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use vramtrace_tests::harness::{bin_dir, clean_env, python, run_within, sim_dir, vramtrace};
use vramtrace_tests::pages::{pages, root, sh_lines};

const LIMIT: Duration = Duration::from_secs(300);

/// Lines not run here, by a prefix of the line, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "./scripts/demo.sh",
        "builds a release; its commands are run by tests/tests/demo.rs",
    ),
    ("cargo build --workspace", "the test command itself"),
    (
        "pip install .",
        "builds a wheel with maturin, fetched from PyPI",
    ),
    (
        "vramtrace run -o traces/ torchrun",
        "needs torchrun (PyTorch)",
    ),
    ("srun ", "needs Slurm"),
    (
        "vramtrace run -o traces/ accelerate",
        "needs Hugging Face accelerate",
    ),
    ("vramtrace run -o traces/ deepspeed", "needs DeepSpeed"),
    ("docker run", "needs Docker and a GPU container image"),
];

/// A program a reader would trace: allocations through the CUDA runtime from Python.
const TRAIN_PY: &str = r#"import ctypes
runtime = ctypes.CDLL("libcudart.so.12")
pointers = [ctypes.c_void_p() for _ in range(4)]
for i, p in enumerate(pointers):
    assert runtime.cudaMalloc(ctypes.byref(p), ctypes.c_size_t((i + 1) << 20)) == 0
for p in pointers:
    assert runtime.cudaFree(p) == 0
"#;

/// Runs `vramtrace ARGS` in `dir`, which must succeed.
fn vt(dir: &Path, args: &[&str]) {
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd).current_dir(dir).args(args);
    let out = run_within(&mut cmd, LIMIT);
    // The demo ends with its CUDA error, and `run` with the program's status.
    assert!(
        out.status.success() || args[0] == "run",
        "vramtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The directory every line starts from.
fn prepare(base: &Path) {
    let demo = sim_dir().join("demo");
    let demo = demo.to_str().expect("a UTF-8 path");
    for (dir, capacity) in [
        ("traces", "24GiB"),
        ("last-run", "32GiB"),
        ("demo-traces", "24GiB"),
    ] {
        vt(
            base,
            &[
                "run",
                "--sim",
                "--sim-capacity",
                capacity,
                "-o",
                dir,
                "--",
                demo,
            ],
        );
    }
    for (file, run) in [
        ("snapshot.pickle", "traces"),
        ("a.pickle", "last-run"),
        ("b.pickle", "traces"),
    ] {
        vt(base, &["export", "--format", "memory-viz", "-o", file, run]);
    }
    std::fs::create_dir(base.join("snapshots")).unwrap();
    for rank in 0..2 {
        let to = base.join(format!("snapshots/snapshot_rank{rank}.pickle"));
        std::fs::copy(base.join("snapshot.pickle"), to).unwrap();
    }
    vt(base, &["pack", "-o", "run.vtpack", "traces"]);
    std::fs::write(base.join("train.py"), TRAIN_PY).unwrap();
    std::os::unix::fs::symlink(
        sim_dir().join("runtime_dynamic"),
        base.join("my_cuda_program"),
    )
    .unwrap();
    std::fs::create_dir(base.join("target")).unwrap();
    std::os::unix::fs::symlink(bin_dir(), base.join("target/release")).unwrap();
}

/// What a line writes: the values of its output options, what `>` redirects to, and
/// `VRAMTRACE_OUTPUT`, with `~` read as `home`.
fn outputs(line: &str, home: &Path) -> Vec<PathBuf> {
    let words: Vec<&str> = line
        .split('#')
        .next()
        .unwrap_or(line)
        .split_whitespace()
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let value = match *w {
            "-o" | "--output" | "--svg" | "--junit" | "--flamegraph" | ">" => words.get(i + 1),
            _ => None,
        };
        let value = value
            .copied()
            .or_else(|| w.strip_prefix("VRAMTRACE_OUTPUT="));
        if let Some(v) = value {
            out.push(match v.strip_prefix("~/") {
                Some(rest) => home.join(rest),
                None => PathBuf::from(v),
            });
        }
    }
    out
}

/// The status a line should end with: `check` gives 1 when a limit is broken, and the
/// demo breaks `--max-peak 20GiB` (a 23.1 GiB peak) and `--no-oom`, but grew by nothing
/// against `last-run/`, whose card was larger; `run` gives the program's, and the demo
/// ends with its CUDA error.
fn expected_status(line: &str) -> Option<i32> {
    if line.contains("vramtrace check") && line.contains("--max-peak 20GiB") {
        Some(1)
    } else if line.contains("/sim/demo") {
        None
    } else {
        Some(0)
    }
}

/// `vramtrace run` with `--sim`: there is no GPU here.
fn on_the_simulated_stack(line: &str) -> String {
    if line.contains("run --sim") {
        line.to_string()
    } else {
        line.replace("vramtrace run ", "vramtrace run --sim ")
    }
}

#[test]
fn every_shell_line_of_the_readme_and_the_guide_runs() {
    let work = tempfile::tempdir().unwrap();
    let base = work.path().join("base");
    std::fs::create_dir(&base).unwrap();
    prepare(&base);
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    let mut skipped = BTreeSet::new();
    let mut failures = Vec::new();
    for (page, text) in pages() {
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (n, line) in sh_lines(&text) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some((prefix, _)) = NOT_RUN.iter().find(|(p, _)| line.starts_with(p)) {
                skipped.insert(*prefix);
                continue;
            }
            // Each line in a copy of the prepared directory, with a home of its own.
            let case = work.path().join(format!("case-{ran}"));
            let copied = Command::new("cp")
                .arg("-a")
                .arg(&base)
                .arg(&case)
                .status()
                .unwrap();
            assert!(copied.success());
            let home = case.join("home");
            for dir in [
                ".local/share/bash-completion/completions",
                ".local/share/man/man1",
            ] {
                std::fs::create_dir_all(home.join(dir)).unwrap();
            }
            let outputs = outputs(line, &home);
            for o in &outputs {
                let o = case.join(o);
                let _ = std::fs::remove_dir_all(&o);
                let _ = std::fs::remove_file(&o);
            }
            let run = on_the_simulated_stack(line);
            let mut cmd = Command::new("sh");
            clean_env(&mut cmd)
                .env_remove(vramtrace_tests::truth::ENV)
                .current_dir(&case)
                .env("HOME", &home)
                .env("PATH", &path)
                .env("LD_LIBRARY_PATH", sim_dir())
                .arg("-c")
                .arg(run.replace("python ", &format!("{} ", python().display())));
            let out = run_within(&mut cmd, LIMIT);
            ran += 1;
            let code = out.status.code();
            let mut wrong = Vec::new();
            match expected_status(line) {
                Some(want) if code != Some(want) => {
                    wrong.push(format!("exited with {code:?}, not {want}"))
                }
                None if code.is_none() => wrong.push("was killed".to_string()),
                _ => {}
            }
            for o in &outputs {
                let at = case.join(o);
                let written = match std::fs::metadata(&at) {
                    Ok(m) if m.is_dir() => std::fs::read_dir(&at).unwrap().next().is_some(),
                    Ok(m) => m.len() > 0,
                    Err(_) => false,
                };
                if !written {
                    wrong.push(format!("wrote nothing at {}", o.display()));
                }
            }
            if outputs.is_empty() && line.contains("vramtrace run ") {
                // A run's traces go to a new directory of its own.
                let made = std::fs::read_dir(&case).unwrap().any(|e| {
                    let name = e.unwrap().file_name();
                    name.to_string_lossy().starts_with("vramtrace-")
                });
                if !made {
                    wrong.push("left no vramtrace-* directory".to_string());
                }
            } else if outputs.is_empty() && out.stdout.is_empty() {
                wrong.push("printed nothing".to_string());
            }
            if !wrong.is_empty() {
                failures.push(format!(
                    "{name}:{n}: {line}\n    {}\n    stderr: {}",
                    wrong.join("; "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    for (prefix, why) in NOT_RUN {
        assert!(
            skipped.contains(prefix),
            "NOT_RUN lists `{prefix}` ({why}), which no page has any more"
        );
    }
    assert!(ran >= 40, "only {ran} lines run");
}
