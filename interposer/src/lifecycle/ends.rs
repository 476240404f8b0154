//! Every way a process ends or replaces itself, so that no recorded event is lost:
//! `_exit`, `_Exit`, `quick_exit`, `exec*` and fatal signals. (Return from `main` and
//! `exit` reach the library's destructor, which calls [`super::finish`].)
#![allow(non_snake_case)]
// Each exported function's safety contract is that of the C function it stands in for.
#![allow(clippy::missing_safety_doc)]

use super::{finish, finish_within, resume};
use crate::writer;
use std::ffi::{c_char, c_int};
use std::time::Duration;

/// For crash signals nobody handles, a last flush.
pub(super) fn install_crash_handlers() {
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        install_crash_handler(sig);
    }
}

/// Only where the disposition is the default (the process would die anyway): a program's
/// own handler is never replaced. SIGTERM and SIGINT are left alone, since changing them
/// is visible (Python reports a foreign handler); those lose at most one flush interval.
fn install_crash_handler(sig: c_int) {
    // SAFETY: sigaction with valid structs.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_crash as *const () as usize;
        new.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(sig, &new, std::ptr::null_mut());
    }
}

extern "C" fn on_crash(sig: c_int) {
    writer::flush_from_signal(sig, super::writer_thread::started());
    // SA_RESETHAND restored the default action: die of the same signal, as without us.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(sig) };
}

fn next(name: &std::ffi::CStr) -> usize {
    // SAFETY: RTLD_NEXT from our own code.
    unsafe { crate::dlsym::real_dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// `_exit` skips atexit handlers and destructors: write now. The writer may be in the
/// middle of a write on its own thread; a first write names every frame and took over
/// 200 ms on a loaded machine, and giving up then lost everything queued. Only a writer
/// that makes no progress for seconds (a hung file system), or is still busy after half
/// a minute, is given up on, so that the program can end.
const STALLED: Duration = Duration::from_secs(5);
const AT_MOST: Duration = Duration::from_secs(30);

fn before_immediate_exit() {
    let _ = std::panic::catch_unwind(|| finish_within("_exit", STALLED, AT_MOST));
}

/// Writes, then ends the process by the real `name`.
unsafe fn exit_by(name: &std::ffi::CStr, status: c_int) -> ! {
    before_immediate_exit();
    let real = next(name);
    if real != 0 {
        let f = std::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> !>(real);
        f(status);
    }
    libc::syscall(libc::SYS_exit_group, status);
    std::process::abort()
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    exit_by(c"_exit", status)
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

type Argv = *const *const c_char;

/// `exec*` replaces the image without running exit handlers: write first. When exec
/// fails the program goes on and so does the trace.
fn before_exec() {
    let _ = std::panic::catch_unwind(|| finish("exec"));
}

/// The exec returned, so it failed: the writer thread writes again. `r` (and errno) are
/// the call's own.
fn after_failed_exec(r: c_int) -> c_int {
    resume();
    r
}

/// Calls the real `name` (by `call`, given its address) between [`before_exec`] and
/// [`after_failed_exec`].
unsafe fn exec_with(name: &std::ffi::CStr, call: impl FnOnce(usize) -> c_int) -> c_int {
    before_exec();
    let real = next(name);
    if real == 0 {
        return after_failed_exec(-1);
    }
    after_failed_exec(call(real))
}

type Exec2 = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
type Exec3 = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    exec_with(c"execve", |f| {
        std::mem::transmute::<usize, Exec3>(f)(path, argv, envp)
    })
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    exec_with(c"execv", |f| {
        std::mem::transmute::<usize, Exec2>(f)(path, argv)
    })
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    exec_with(c"execvp", |f| {
        std::mem::transmute::<usize, Exec2>(f)(file, argv)
    })
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    exec_with(c"execvpe", |f| {
        std::mem::transmute::<usize, Exec3>(f)(file, argv, envp)
    })
}

/// glibc's own `fexecve` and `execveat` reach the kernel without passing `execve`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    exec_with(c"fexecve", |f| {
        let f = std::mem::transmute::<usize, unsafe extern "C" fn(c_int, Argv, Argv) -> c_int>(f);
        f(fd, argv, envp)
    })
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    type ExecAt = unsafe extern "C" fn(c_int, *const c_char, Argv, Argv, c_int) -> c_int;
    exec_with(c"execveat", |f| {
        std::mem::transmute::<usize, ExecAt>(f)(dirfd, path, argv, envp, flags)
    })
}

/// `quick_exit` runs the `at_quick_exit` handlers and then glibc's own `_exit`, which
/// does not pass ours: write first (what the handlers record follows the end record).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn quick_exit(status: c_int) -> ! {
    exit_by(c"quick_exit", status)
}
