//! The real PyTorch snapshots in `../shared/fixtures/torch-snapshots`: beside the clone in
//! CI, not beside a user's.

use std::path::PathBuf;

/// Their directory. Absent, the test (named by its thread, as the test harness names it)
/// skips with one line on stderr - unless `VRAMTRACE_REQUIRE_FIXTURES=1` (as `.ci/run`
/// sets it), where a skip would hide a missing fixture, so it fails instead.
pub fn dir() -> Option<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/torch-snapshots");
    if dir.is_dir() {
        return Some(dir);
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let required = std::env::var_os("VRAMTRACE_REQUIRE_FIXTURES").is_some_and(|v| v == "1");
    assert!(
        !required,
        "{test}: {} is absent and VRAMTRACE_REQUIRE_FIXTURES=1",
        dir.display()
    );
    // Straight to the process's stderr: the test harness captures `eprintln!`, and a
    // skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: no {} (../shared is beside CI's clone only)",
        dir.display()
    );
    None
}

/// The snapshot files there (`.pickle`, `.pkl`), sorted; none where [`dir`] skips.
pub fn snapshots() -> Option<Vec<PathBuf>> {
    let dir = dir()?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pickle" || x == "pkl"))
        .collect();
    files.sort();
    Some(files)
}
