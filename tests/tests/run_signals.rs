//! `vramtrace run` and signals: SIGTERM, SIGHUP, SIGINT and SIGQUIT sent to vramtrace reach
//! the command (its process group when it has its own); vramtrace waits for it, removes
//! the Python hook's directory, and exits with the command's status. A command that
//! cannot be started gives a shell's status and message. The command is a Python script
//! that writes down its own pid, its PYTHONPATH (the hook's directory first) and the
//! signal it got: the ground truth.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vramtrace_tests::harness::{clean_env, python, vramtrace};

const LIMIT: Duration = Duration::from_secs(120);

/// argv: READY MODE. `handle`: exits 7 from a handler for the four signals, after writing
/// the signal's number to READY.got; `default`: the signals' default actions; `group`:
/// leads a process group of its own, with a `sleep` child in it.
const COMMAND: &str = r#"
import os, signal, sys, time
ready, mode = sys.argv[1], sys.argv[2]
extra = 0
if mode == "group":
    import subprocess
    os.setpgid(0, 0)
    extra = subprocess.Popen(["sleep", "300"]).pid
def got(sig, frame):
    with open(ready + ".got", "w") as f:
        f.write(str(sig))
    sys.exit(7)
if mode == "handle":
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(s, got)
with open(ready + ".tmp", "w") as f:
    f.write("%d %d %s" % (os.getpid(), extra, os.environ.get("PYTHONPATH", "")))
os.rename(ready + ".tmp", ready)
time.sleep(300)
sys.exit(3)
"#;

struct Started {
    vramtrace: Child,
    dir: tempfile::TempDir,
    /// The command's own pid, its child's (group mode) and its hook directory.
    pid: i32,
    grandchild: i32,
    hook: PathBuf,
}

fn start(mode: &str) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .arg("run")
        .arg("-o")
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(python())
        .arg("-c")
        .arg(COMMAND)
        .arg(&ready)
        .arg(mode)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // An ignored signal stays ignored across exec: under `nohup`, or a CI agent started
    // so, the command would outlive the signal these tests expect to end it.
    // SAFETY: signal() is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            for s in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut vramtrace = cmd.spawn().expect("vramtrace starts");
    let deadline = Instant::now() + LIMIT;
    let said = loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            break text;
        }
        if let Ok(Some(status)) = vramtrace.try_wait() {
            panic!("vramtrace ended ({status}) before the command was ready");
        }
        assert!(Instant::now() < deadline, "the command never got ready");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut parts = said.splitn(3, ' ');
    let pid = parts.next().unwrap().parse().unwrap();
    let grandchild = parts.next().unwrap().parse().unwrap();
    let pythonpath = parts.next().unwrap_or_default();
    let hook = PathBuf::from(pythonpath.split(':').next().unwrap());
    assert!(
        hook.join("sitecustomize.py").is_file(),
        "the hook is installed: {said}"
    );
    Started {
        vramtrace,
        dir,
        pid,
        grandchild,
        hook,
    }
}

/// A failing test leaves no command behind (before forwarding existed, a signalled
/// vramtrace left its command running).
impl Drop for Started {
    fn drop(&mut self) {
        for pid in [self.pid, self.grandchild] {
            if pid > 0 && alive(pid) {
                // SAFETY: kill of a process this test started (through vramtrace).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.vramtrace.kill();
        let _ = self.vramtrace.wait();
    }
}

/// Whether `pid` is a live process (a zombie has ended).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Signals vramtrace, and waits for it (failing after [`LIMIT`]): its exit code.
fn signal_and_wait(s: &mut Started, sig: libc::c_int) -> Option<i32> {
    // SAFETY: kill with a pid this test started.
    assert_eq!(unsafe { libc::kill(s.vramtrace.id() as i32, sig) }, 0);
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(status) = s.vramtrace.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = s.vramtrace.kill();
            panic!("vramtrace did not end after signal {sig}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone_within_limit(pid: i32) -> bool {
    let deadline = Instant::now() + LIMIT;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn each_signal_reaches_the_command_and_vramtrace_exits_with_its_status() {
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        let mut s = start("handle");
        let code = signal_and_wait(&mut s, sig);
        let got = std::fs::read_to_string(s.dir.path().join("ready.got"));
        assert_eq!(
            got.ok(),
            Some(sig.to_string()),
            "signal {sig} reached the command"
        );
        assert_eq!(code, Some(7), "the command's status, after signal {sig}");
        assert!(!alive(s.pid), "the command ended");
        assert!(!s.hook.exists(), "{} was removed", s.hook.display());
    }
}

/// A command killed by the signal: vramtrace exits 128+15, as a shell reports it.
#[test]
fn a_command_killed_by_the_forwarded_signal_gives_128_plus_n() {
    let mut s = start("default");
    assert_eq!(
        signal_and_wait(&mut s, libc::SIGTERM),
        Some(128 + libc::SIGTERM)
    );
    assert!(!alive(s.pid));
    assert!(!s.hook.exists(), "{} was removed", s.hook.display());
}

/// A command leading its own process group gets the signal with its whole group.
#[test]
fn a_command_with_its_own_process_group_gets_it_for_the_group() {
    let mut s = start("group");
    assert!(alive(s.grandchild), "the group's other process is running");
    assert_eq!(
        signal_and_wait(&mut s, libc::SIGHUP),
        Some(128 + libc::SIGHUP)
    );
    assert!(
        gone_within_limit(s.grandchild),
        "the whole group got SIGHUP"
    );
    assert!(!s.hook.exists());
}

/// The status and message a shell gives, for the same command: the ground truth.
fn shell_status(command: &str) -> Option<i32> {
    Command::new("sh")
        .arg("-c")
        .arg(format!("'{command}'"))
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
}

#[test]
fn a_command_that_cannot_start_exits_as_a_shell_says() {
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\necho hi\n").unwrap();
    let missing = dir.path().join("no-such-dir/cmd");
    let cases: [(&str, &str); 3] = [
        ("vt-no-such-command", "command not found"),
        (missing.to_str().unwrap(), "No such file or directory"),
        (not_executable.to_str().unwrap(), "Permission denied"),
    ];
    for (command, message) in cases {
        let out = Command::new(vramtrace())
            .args(["run", "-o"])
            .arg(dir.path().join("traces"))
            .args(["--", command])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            shell_status(command),
            "{command}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("vramtrace: {command}: {message}")),
            "{stderr}"
        );
    }
    assert_eq!(
        shell_status("vt-no-such-command"),
        Some(127),
        "the shell's own"
    );
    let not_executable = not_executable.to_str().unwrap();
    assert_eq!(shell_status(not_executable), Some(126), "the shell's own");
}
