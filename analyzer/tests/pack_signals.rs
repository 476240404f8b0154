//! A pack is unpacked into a temporary directory: Ctrl-C while it is being read must not
//! leave that directory behind.

mod common;

use common::{alloc, end, free, header, write_trace, MIB};
use std::process::Command;
use std::time::{Duration, Instant};

/// Temporary directories a reading of a pack left in `tmp`.
fn unpacked_in(tmp: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vramtrace-pack-")
        })
        .collect()
}

/// A pack of 2,000 processes in `run`: reading it takes far longer than noticing the
/// unpacking.
fn pack_of_many(run: &std::path::Path) -> std::path::PathBuf {
    for pid in 1..=2000u32 {
        let mut lines = vec![header(pid, "node", 0, 1_700_000_000_000_000_000, None)];
        for i in 0..40u64 {
            let addr = 0x7000_0000_0000 + i * MIB;
            lines.push(alloc(10 + i * 2, 0, "cudaMalloc", addr, MIB));
            lines.push(free(11 + i * 2, 0, "cudaFree", addr));
        }
        lines.push(end(1000, 80));
        write_trace(run, &format!("vramtrace-node-{pid}.jsonl"), &lines);
    }
    let pack = run.join("run.vtpack");
    common::vramtrace_ok(&["pack", "-o", pack.to_str().unwrap(), run.to_str().unwrap()]);
    pack
}

/// `vramtrace summary --json PACK` with TMPDIR `tmp`, `ignored` signals ignored from the
/// start, once its unpacked directory has appeared.
fn reading(pack: &std::path::Path, tmp: &std::path::Path, ignored: &[i32]) -> std::process::Child {
    let ignored = ignored.to_vec();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtrace"));
    cmd.args(["summary", "--json"])
        .arg(pack)
        .env("TMPDIR", tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: signal() is async-signal-safe, as pre_exec requires.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            // As a terminal's foreground process has them: a test run started in the
            // background (`cmd &` in a script) inherits SIGINT and SIGQUIT ignored.
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(s, libc::SIG_DFL);
            }
            for &s in &ignored {
                libc::signal(s, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while unpacked_in(tmp).is_empty() {
        assert!(Instant::now() < deadline, "no unpacked directory appeared");
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before it unpacked"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

#[test]
fn ctrl_c_while_a_pack_is_read_removes_its_unpacked_directory() {
    let run = tempfile::tempdir().unwrap();
    let pack = pack_of_many(run.path());
    let tmp = tempfile::tempdir().unwrap();
    let mut child = reading(&pack, tmp.path(), &[]);
    // SAFETY: signalling our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGINT),
        "{status:?}: it ends as Ctrl-C ends it"
    );
    assert_eq!(unpacked_in(tmp.path()), Vec::<std::path::PathBuf>::new());
}

/// Under `nohup`, a closed terminal's SIGHUP does not stop the reading.
#[test]
fn a_hangup_ignored_from_the_start_stays_ignored() {
    let run = tempfile::tempdir().unwrap();
    let pack = pack_of_many(run.path());
    let tmp = tempfile::tempdir().unwrap();
    let mut child = reading(&pack, tmp.path(), &[libc::SIGHUP]);
    // SAFETY: signalling our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}: read to its end");
    assert_eq!(unpacked_in(tmp.path()), Vec::<std::path::PathBuf>::new());
}
