//! vramtrace's own threads (the writer, the NVML sampler) take no signals meant for the
//! program: a process-directed signal goes to one of the program's threads, where its
//! handlers expect to run. (A handler that calls `_exit` on the writer thread, mid-write,
//! would also wait for the writer it interrupted.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

/// Thread ids of vramtrace's own threads in this process as `/proc` names them (0: a
/// free slot): they are not the program's, and must not keep it alive
/// ([`crate::last_thread`]).
static OURS: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];

std::thread_local! {
    /// Whether the current thread is one of vramtrace's own.
    static CURRENT_IS_OURS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is one of vramtrace's own.
pub fn current_is_ours() -> bool {
    CURRENT_IS_OURS.try_with(|c| c.get()).unwrap_or(false)
}

/// Whether `tid`, as `/proc` names it, is one of vramtrace's own threads.
pub fn is_ours(tid: u32) -> bool {
    tid != 0 && OURS.iter().any(|t| t.load(Ordering::Relaxed) == tid)
}

/// How many of vramtrace's own threads run.
pub fn ours() -> usize {
    OURS.iter()
        .filter(|t| t.load(Ordering::Relaxed) != 0)
        .count()
}

/// The calling thread's id as `/proc` names it, from the `/proc/thread-self` link (which
/// opens no descriptor): where `/proc` belongs to another pid namespace (`unshare --pid
/// --fork` without `--mount-proc`), `gettid()` is another thread's number there, and
/// vramtrace's threads, not found under `/proc/self/task`, kept a process whose `main`
/// had called `pthread_exit` alive for ever. `gettid()` where the link cannot be read.
pub fn proc_tid() -> u32 {
    let mut link = [0u8; 64];
    // SAFETY: readlink writes at most the buffer's length; the path is a C string.
    let n = unsafe {
        libc::readlink(
            c"/proc/thread-self".as_ptr(),
            link.as_mut_ptr().cast(),
            link.len(),
        )
    };
    let named = usize::try_from(n)
        .ok()
        .filter(|&n| n < link.len())
        .and_then(|n| link[..n].rsplit(|&b| b == b'/').next())
        .and_then(|digits| std::str::from_utf8(digits).ok()?.parse().ok());
    // SAFETY: gettid has no preconditions.
    named.unwrap_or_else(|| unsafe { libc::syscall(libc::SYS_gettid) } as u32)
}

fn register() {
    let _ = CURRENT_IS_OURS.try_with(|c| c.set(true));
    let tid = proc_tid();
    for slot in &OURS {
        if slot
            .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// In a forked child: none of the parent's threads exist there.
pub fn after_fork_child() {
    for slot in &OURS {
        slot.store(0, Ordering::Relaxed);
    }
}

/// Signals raised by the thread's own instructions: blocking them is undefined, and the
/// kernel kills the process for one that is blocked (SIGSYS: a seccomp filter's trap).
const SYNCHRONOUS: [i32; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// std's default stack size for new threads.
const STACK_BYTES: usize = 2 << 20;

/// Spawns a thread named `name` that starts with every asynchronous signal blocked: the
/// mask is set in the spawning thread around the spawn, so the new one inherits it from
/// its first instruction, and then put back.
pub fn spawn<F>(name: &str, f: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    // SAFETY: sigset_t is plain data, filled by sigfillset before use; pthread_sigmask
    // with valid pointers.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut block);
        for s in SYNCHRONOUS {
            libc::sigdelset(&mut block, s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        let masked = libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) == 0;
        // An explicit stack size: without one, std reads RUST_MIN_STACK with getenv, from
        // whichever program thread made the first CUDA call, while another program thread
        // may be changing the environment.
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                register();
                f()
            });
        if masked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        spawned
    }
}
