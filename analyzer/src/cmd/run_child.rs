//! The command `vramtrace run` starts: the status a shell gives when it cannot start, and
//! the signals passed on to it while it runs.
//!
//! A batch scheduler, `kill` or a closing ssh session signals vramtrace, not the command
//! behind it. Left at their default, SIGTERM and SIGHUP ended vramtrace alone: the
//! command ran on, reparented to init, and the Python hook's temporary directory was
//! never removed. So SIGTERM, SIGHUP, SIGINT and SIGQUIT sent by a process are passed on
//! to the command (to its process group when it leads one of its own), and vramtrace
//! waits for it, cleans up and exits with its status. The same signals from the terminal
//! (Ctrl-C, Ctrl-\, a hangup) went to the whole foreground process group, the command
//! included, and are not sent again.

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// Why a command could not be started, and the status a shell gives for it: 127 when
/// there is no such command, 126 when it is there but cannot be executed.
pub fn not_started(command: &str, e: &std::io::Error) -> (String, i32) {
    match e.kind() {
        std::io::ErrorKind::NotFound if !command.contains('/') => ("command not found".into(), 127),
        std::io::ErrorKind::NotFound => ("No such file or directory".into(), 127),
        std::io::ErrorKind::PermissionDenied if Path::new(command).is_dir() => {
            ("Is a directory".into(), 126)
        }
        std::io::ErrorKind::PermissionDenied => ("Permission denied".into(), 126),
        _ => (format!("cannot execute: {e}"), 126),
    }
}

/// The signals passed on.
const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT];

/// The command's pid while it may be signalled; 0 before it starts and once it has ended
/// (its pid may then be another process's).
static COMMAND: AtomicI32 = AtomicI32::new(0);

/// The forwarded signals blocked from before the command starts until [`Forwarding::start`]:
/// one that arrives meanwhile waits, and is passed on once there is a command to pass it to.
pub struct Forwarding {
    previous_mask: libc::sigset_t,
}

impl Forwarding {
    /// Blocks the forwarded signals in this thread, and has `command` start with the mask
    /// as it was (a child inherits its parent's mask, through `exec` too).
    pub fn block(command: &mut std::process::Command) -> Forwarding {
        use std::os::unix::process::CommandExt;
        // SAFETY: sigset operations on a local set; pthread_sigmask on this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in FORWARDED {
                libc::sigaddset(&mut set, sig);
            }
            let mut previous_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous_mask);
            // Only async-signal-safe calls between fork and exec.
            command.pre_exec(move || {
                libc::pthread_sigmask(libc::SIG_SETMASK, &previous_mask, std::ptr::null_mut());
                Ok(())
            });
            Forwarding { previous_mask }
        }
    }

    /// Passes signals on to `pid` from now on, including any that arrived while blocked.
    pub fn start(self, pid: u32) {
        COMMAND.store(pid as i32, Ordering::SeqCst);
        // SAFETY: installing a handler that only makes async-signal-safe calls.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            for sig in FORWARDED {
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }
}

/// Dropped without [`Forwarding::start`] (the command could not be started), the signals
/// arrive as before.
impl Drop for Forwarding {
    fn drop(&mut self) {
        // SAFETY: restoring this thread's own mask (after `start`, pending signals are
        // delivered here, to the handler).
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous_mask, std::ptr::null_mut());
        }
    }
}

/// Waits until the command `pid` has ended, without reaping it, then stops passing
/// signals on: until it is reaped its pid cannot be another process's.
pub fn wait_for_end(pid: u32) {
    loop {
        // SAFETY: waitid with a zeroed siginfo to fill; WNOWAIT leaves the child waitable.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    COMMAND.store(0, Ordering::SeqCst);
}

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let pid = COMMAND.load(Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // SI_USER, SI_QUEUE, SI_TKILL (<= 0): sent by a process. SI_KERNEL: the terminal's,
    // which the command's process group received already.
    if pid <= 0 || code > 0 {
        return;
    }
    // SAFETY: getpgid and kill are async-signal-safe; errno is kept for the interrupted code.
    unsafe {
        let errno = *libc::__errno_location();
        let target = if libc::getpgid(pid) == pid { -pid } else { pid };
        libc::kill(target, sig);
        *libc::__errno_location() = errno;
    }
}
