//! Python packages from PyPI that a test needs (DuckDB, pytest), each in a virtualenv made
//! once in the target directory and kept between runs.

use crate::harness::succeeds;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(900);

/// The Python of `target/NAME-venv`, made with `pip install REQUIREMENT` unless it can
/// already `import MODULE`. Made under a lock on `target/NAME-venv.lock`: two tests that
/// asked at once each ran `venv --clear` on the same folder, and one failed ("File
/// exists").
pub fn python_with(name: &str, requirement: &str, module: &str) -> PathBuf {
    let dir = crate::pages::root().join(format!("target/{name}-venv"));
    let python = dir.join("bin/python");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(crate::pages::root().join(format!("target/{name}-venv.lock")))
        .expect("the venv's lock file opens");
    lock.lock().expect("the venv's lock is taken");
    let has = |p: &Path| {
        Command::new(p)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has(&python) {
        succeeds(
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&dir),
            LIMIT,
            "python3 -m venv",
        );
        succeeds(
            Command::new(dir.join("bin/pip")).args(["install", "-q", requirement]),
            LIMIT,
            &format!("pip install {requirement}"),
        );
    }
    python
}
