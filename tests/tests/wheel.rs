//! `pip install .` as a user runs it: the wheel built from this checkout, installed into a
//! fresh virtualenv, runs the demo on the simulated GPU and explains it, and its Python
//! module puts markers into the trace.
//!
//! Slow (a release build of the wheel): one test does it all, in a target directory kept
//! between runs (`target/wheel/`) so that a second run only rebuilds what changed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use vramtrace_tests::harness::{clean_env, run_within, succeeds};

const LIMIT: Duration = Duration::from_secs(3000);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn ok(cmd: &mut Command, what: &str) -> String {
    let out = succeeds(cmd, LIMIT, what);
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn venv(dir: &Path) -> PathBuf {
    ok(
        Command::new("python3").args(["-m", "venv"]).arg(dir),
        "python3 -m venv",
    );
    dir.join("bin")
}

#[test]
fn pip_installed_wheel_runs_the_demo_and_marks_phases() {
    let root = workspace();
    let scratch = tempfile::tempdir().unwrap();

    // Build the wheel as pip would, with maturin from PyPI.
    let build = venv(&scratch.path().join("build"));
    ok(
        Command::new(build.join("pip")).args(["install", "-q", "maturin>=1.5,<2"]),
        "pip install maturin",
    );
    let wheels = scratch.path().join("wheels");
    ok(
        clean_env(&mut Command::new(build.join("maturin")))
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", root.join("target/wheel"))
            .args(["build", "--release", "-o"])
            .arg(&wheels),
        "maturin build",
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel was built");

    // A fresh virtualenv, as a user's.
    let user = venv(&scratch.path().join("user"));
    ok(
        Command::new(user.join("pip"))
            .args(["install", "-q", "--no-index"])
            .arg(&wheel),
        "pip install the wheel",
    );
    let vt = user.join("vramtrace");

    // The demo on the simulated GPU: it runs the card out of memory and exits 1.
    let traces = scratch.path().join("traces");
    let mut demo = Command::new(&vt);
    clean_env(&mut demo)
        .args(["run", "--sim", "--sim-capacity", "24GiB", "-o"])
        .arg(&traces)
        .arg(user.join("sim/demo"));
    let out = run_within(&mut demo, LIMIT);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its failures as the demo counted them, against the installed analyzer's post-mortem.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let truth: serde_json::Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix(vramtrace_tests::truth::PREFIX))
        .map(|j| serde_json::from_str(j).unwrap())
        .expect("the demo prints its truth");
    let failed: u64 = truth["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["failed"].as_u64().unwrap())
        .sum();
    let oom = run_within(
        Command::new(&vt).args(["oom", "--json"]).arg(&traces),
        LIMIT,
    );
    let oom: serde_json::Value = serde_json::from_slice(&oom.stdout).expect("oom --json");
    assert!(failed > 0);
    assert_eq!(oom["failures"].as_array().unwrap().len() as u64, failed);

    // The Python module: markers reach the trace under vramtrace, and are no-ops without.
    let script = "import ctypes, vramtrace\n\
        print('active', vramtrace.active())\n\
        cuda = ctypes.CDLL('libcudart.so.12')\n\
        p = ctypes.c_void_p()\n\
        with vramtrace.phase('load'):\n\
        \x20   assert cuda.cudaMalloc(ctypes.byref(p), 1 << 20) == 0\n\
        vramtrace.mark('done')\n";
    let bare = ok(
        clean_env(&mut Command::new(user.join("python"))).args([
            "-c",
            "import vramtrace; vramtrace.mark('x'); print('active', vramtrace.active())",
        ]),
        "python without vramtrace",
    );
    assert!(bare.contains("active False"), "{bare}");
    let marked = scratch.path().join("marked");
    let printed = ok(
        clean_env(&mut Command::new(&vt))
            .args(["run", "--sim", "--no-torch", "-o"])
            .arg(&marked)
            .arg(user.join("python"))
            .args(["-c", script]),
        "python under vramtrace",
    );
    assert!(printed.contains("active True"), "{printed}");
    let mut names = Vec::new();
    for trace in vramtrace_tests::harness::trace_paths(&marked) {
        let text = std::fs::read_to_string(trace).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(text) = v["name"]["text"].as_str() {
                names.push(text.to_string());
            }
        }
    }
    for want in ["load", "/load", "done"] {
        assert!(
            names.iter().any(|n| n == want),
            "marker {want} in {names:?}"
        );
    }
}
