//! With the `bundle` feature (set by the Python wheel's build, pyproject.toml), builds what
//! the `vramtrace` binary needs beside it - `libvramtrace.so` and the simulated CUDA stack
//! with its demo - and stages them in `python/data/scripts/`, which the wheel installs
//! into the same `bin/` as the binary, where `vramtrace run` looks for them.
//!
//! A wheel build compiles one crate; these come from two others of the workspace, so they
//! are built by a nested cargo with a target directory of its own (the outer one is locked).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Files of `sim/` that `vramtrace run --sim` and the demo need (symlinks become copies:
/// a wheel holds no links).
const SIM_FILES: &[&str] = &[
    "libcuda.so.1",
    "libcuda.so",
    "libcudart.so.12",
    "libcudart.so.13",
    "libcudart.so",
    "libnvidia-ml.so.1",
    "demo",
];

fn main() {
    if std::env::var_os("CARGO_FEATURE_BUNDLE").is_none() {
        return;
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.parent().expect("the analyzer is in the workspace");
    for dir in ["interposer", "schema", "tests/sim", "tests/workloads"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("bundle");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .env_remove("CARGO_TARGET_DIR")
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "vramtrace-interposer",
        ])
        .args(["-p", "vramtrace-tests", "--lib", "--target-dir"])
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building the interposer and the simulated stack failed"
    );

    let built = target.join("release");
    let staged = root.join("python/data/scripts");
    std::fs::create_dir_all(staged.join("sim")).expect("staging directory");
    copy(
        &built.join("libvramtrace.so"),
        &staged.join("libvramtrace.so"),
    );
    for name in SIM_FILES {
        let from = built.join("sim").join(name);
        if from.exists() {
            copy(&from, &staged.join("sim").join(name));
        }
    }
}

fn copy(from: &Path, to: &Path) {
    // Follows a symlink: the wheel gets the library itself.
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
}
