//! Descriptors of vramtrace's own, in a process whose program may take any descriptor
//! back at any moment: it calls `close_range(3, ~0)` and opens its log, which gets 3.
//!
//! Files vramtrace's threads only read for a moment (`/proc/self/stat`, `/proc/self/task`,
//! `/proc/self/cmdline`) were opened with `std::fs` on the lowest free number: the
//! program's `close_range` closed the writer's 3, its log got 3, and the writer's close
//! closed the program's log (its next write failed with EBADF), or std's `closedir`
//! panicked on the writer thread. Checking the descriptor's identity before closing it
//! still left the instant between the check and the `close`, which a test hit in 9 runs
//! of 20. So [`read`] and [`each_entry`] open, read and close in a short-lived child that
//! has a descriptor table of its own ([`in_own_table`]): none of it is the program's.
//!
//! The trace's descriptor has to be in the program's table ([`crate::trace_fd`]): it is
//! moved high at once, and the low number closed only while `fstat` still shows the trace
//! ([`moved_high`]). Nothing here allocates but the buffer [`in_own_table`] reads into,
//! and nothing panics.

/// A file's device and inode.
pub type Identity = (u64, u64);

/// The device and inode of the file open on `fd`.
pub fn identity(fd: i32) -> Option<Identity> {
    // SAFETY: stat is plain data; fstat is async-signal-safe.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The lowest number vramtrace's descriptors are moved to: high enough that a program's
/// own files never get it, low enough that the kernel's descriptor table does not grow
/// for it (a limit of a million would cost megabytes), and below the limit.
fn high_number() -> i32 {
    // SAFETY: rlimit is plain data.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    };
    cur.saturating_sub(16).clamp(3, 1000) as i32
}

/// Closes `fd` if it still holds the file `expected`.
fn close_if(fd: i32, expected: Identity) {
    if identity(fd) == Some(expected) {
        // SAFETY: our descriptor, as its identity says.
        unsafe { libc::close(fd) };
    }
}

/// Moves `fd`, just opened on the file `expected`, to a high number (close-on-exec). The
/// low number is closed only if it still holds that file. `fd` itself where no copy can
/// be made (every number above [`high_number`] taken): a trace at a low number beats none.
/// `None` if the copy is not of that file (the program closed `fd` and took the number):
/// the copy is closed, `fd` left.
pub fn moved_high(fd: i32, expected: Identity) -> Option<i32> {
    // SAFETY: fcntl on a descriptor; the copy is ours whatever it holds.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, high_number()) };
    if high < 0 {
        return Some(fd);
    }
    match identity(high) {
        Some(id) if id == expected => {
            close_if(fd, expected);
            Some(high)
        }
        Some(other) => {
            close_if(high, other);
            None
        }
        None => None,
    }
}

/// `path` with a NUL after it, in `buf`, and `/proc/self/` spelled with this process's
/// id, `/proc/thread-self/` with this thread's (in the child of [`in_own_table`], `self`
/// is the child); `None` if it does not fit.
fn c_path<'a>(path: &str, buf: &'a mut [u8; 256]) -> Option<&'a [u8]> {
    let mut len = 0;
    let mut push = |bytes: &[u8]| -> Option<()> {
        buf.get_mut(len..len + bytes.len())?.copy_from_slice(bytes);
        len += bytes.len();
        Some(())
    };
    let thread = path.strip_prefix("/proc/thread-self/");
    let rest = match path.strip_prefix("/proc/self/").or(thread) {
        Some(rest) => {
            push(b"/proc/")?;
            let mut digits = [0u8; 16];
            push(proc_pid(&mut digits))?;
            if thread.is_some() {
                push(b"/task/")?;
                push(decimal(crate::thread::proc_tid(), &mut digits))?;
            }
            push(b"/")?;
            rest
        }
        None => path,
    };
    if rest.as_bytes().contains(&0) {
        return None;
    }
    push(rest.as_bytes())?;
    push(&[0])?;
    Some(&buf[..len])
}

/// This process's id as `/proc` names it, read from the `/proc/self` link (which opens
/// no descriptor): where `/proc` belongs to another pid namespace (`unshare --pid --fork`
/// without `--mount-proc`), `getpid()` is another process's number there. `getpid()`'s
/// digits where the link cannot be read.
fn proc_pid(digits: &mut [u8; 16]) -> &[u8] {
    // SAFETY: readlink writes at most the buffer's length; the path is a C string.
    let n = unsafe { libc::readlink(c"/proc/self".as_ptr(), digits.as_mut_ptr().cast(), 16) };
    if n > 0 && (n as usize) < digits.len() && digits[..n as usize].iter().all(u8::is_ascii_digit) {
        return &digits[..n as usize];
    }
    decimal(std::process::id(), digits)
}

/// `n` in decimal, at the end of `digits`.
fn decimal(mut n: u32, digits: &mut [u8; 16]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}

/// What the child of [`in_own_table`] does, in memory it shares with its parent.
#[repr(C)]
struct Job {
    path: *const libc::c_char,
    directory: bool,
    buf: *mut u8,
    cap: usize,
    /// Bytes read, or -1.
    len: isize,
}

/// The child: raw system calls only (it shares the parent's memory and thread pointer,
/// so nothing that takes a lock or allocates).
extern "C" fn job_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Job`, which outlives the child (CLONE_VFORK).
    let job = unsafe { &mut *arg.cast::<Job>() };
    let flags =
        libc::O_RDONLY | libc::O_CLOEXEC | if job.directory { libc::O_DIRECTORY } else { 0 };
    // SAFETY: raw system calls on the child's own descriptor and the job's buffer.
    unsafe {
        let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, job.path, flags);
        if fd < 0 {
            return 1;
        }
        let call = if job.directory {
            libc::SYS_getdents64
        } else {
            libc::SYS_read
        };
        let mut len = 0usize;
        while len < job.cap {
            let n = libc::syscall(call, fd, job.buf.add(len), job.cap - len);
            if n == 0 {
                break;
            }
            if n < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                // getdents64 says EINVAL when the next record does not fit: the rest
                // is left out, as a file's rest beyond `cap` is.
                if job.directory && len > 0 {
                    break;
                }
                len = usize::MAX;
                break;
            }
            len += n as usize;
        }
        job.len = if len == usize::MAX { -1 } else { len as isize };
        libc::syscall(libc::SYS_close, fd);
    }
    0
}

/// Reads up to `max` bytes of the file (or the `getdents64` records of the directory) at
/// `path` in a short-lived child that shares this process's memory but not its
/// descriptor table (`clone(CLONE_VM|CLONE_VFORK)`, as `posix_spawn` does): the child's
/// descriptor lives and dies in its own copy, so no program's `close_range`, `open` or
/// `dup2` can meet it, and no descriptor of the program's is ever closed. The caller
/// waits the microseconds the child runs. `None` if the child cannot be made (a limit on
/// processes, a sandbox that forbids `clone`) or the file cannot be read.
fn in_own_table(path: &str, directory: bool, max: usize) -> Option<Vec<u8>> {
    let mut name = [0u8; 256];
    let name = c_path(path, &mut name)?;
    let mut data: Vec<u8> = Vec::with_capacity(max);
    let mut job = Job {
        path: name.as_ptr().cast(),
        directory,
        buf: data.as_mut_ptr(),
        cap: max,
        len: -1,
    };
    // The child's stack, in this frame: with CLONE_VFORK this thread sleeps until the
    // child has exited, below this frame. u128: the ABI's 16-byte alignment. 8 KiB: the
    // child makes a few system calls, and a hook at the queue's bound may run on a
    // program thread with a small stack.
    let mut stack = [0u128; 512];
    // SAFETY: sigset_t is plain data; the mask is restored below. Every signal blocked:
    // no handler of the program's runs in the child.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: errno is this thread's; the child shares it, and a hook's caller keeps its own.
    let errno = unsafe { *libc::__errno_location() };
    let pid = unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = stack.as_mut_ptr().add(stack.len()).cast::<libc::c_void>();
        // No exit signal: the program's SIGCHLD handler and its `wait` do not see it.
        let pid = libc::clone(
            job_child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK,
            (&mut job as *mut Job).cast(),
        );
        if pid > 0 {
            let mut status = 0;
            while libc::waitpid(pid, &mut status, libc::__WCLONE) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        *libc::__errno_location() = errno;
        pid
    };
    if pid <= 0 || job.len < 0 {
        return None;
    }
    // SAFETY: the child wrote `len` (at most `max`) bytes.
    unsafe { data.set_len(job.len as usize) };
    Some(data)
}

/// Up to `max` bytes of the file at `path`; `None` if it cannot be opened or read. The
/// file is opened outside the program's descriptor table ([`in_own_table`]).
pub fn read(path: &str, max: usize) -> Option<Vec<u8>> {
    in_own_table(path, false, max)
}

/// Calls `each` with the name of every entry of the directory `path` (`.` and `..`
/// left out; up to `max` bytes of `getdents64` records) until it returns `false`; `None`
/// if the directory cannot be read. Opened outside the program's descriptor table, like
/// [`read`].
pub fn each_entry(path: &str, max: usize, mut each: impl FnMut(&[u8]) -> bool) -> Option<()> {
    let records = in_own_table(path, true, max)?;
    let mut at = 0;
    // A record: inode (8), offset (8), length (2), type (1), name ending in NUL.
    while at + 19 <= records.len() {
        let len = u16::from_ne_bytes([records[at + 16], records[at + 17]]) as usize;
        if len < 19 || at + len > records.len() {
            return None;
        }
        let name = &records[at + 19..at + len];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if name != b"." && name != b".." && !each(name) {
            return Some(());
        }
        at += len;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_self_is_this_process() {
        let mut buf = [0u8; 256];
        let path = c_path("/proc/self/task", &mut buf).unwrap();
        let expected = format!("/proc/{}/task\0", std::process::id());
        assert_eq!(path, expected.as_bytes());
        let mut buf = [0u8; 256];
        assert_eq!(c_path("/etc/x", &mut buf).unwrap(), b"/etc/x\0");
        assert!(c_path(&"x".repeat(300), &mut buf).is_none());
    }

    #[test]
    fn proc_thread_self_is_this_thread_read_from_the_child() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let mut buf = [0u8; 256];
        let path = c_path("/proc/thread-self/stat", &mut buf).unwrap();
        let expected = format!("/proc/{}/task/{tid}/stat\0", std::process::id());
        assert_eq!(path, expected.as_bytes());
        // Read in the child of `in_own_table`: still this thread's, not the child's.
        let stat = read("/proc/thread-self/stat", 4096).unwrap();
        assert!(stat.starts_with(format!("{tid} (").as_bytes()));
    }

    #[test]
    fn reads_a_bounded_file() {
        let stat = read("/proc/self/stat", 64 * 1024).unwrap();
        assert!(stat.ends_with(b"\n"));
        let limited = read("/proc/self/stat", 10).unwrap();
        assert_eq!(limited, stat[..10]);
        assert!(read("/nonexistent/file", 10).is_none());
    }

    #[test]
    fn lists_this_process_s_threads() {
        let me = unsafe { libc::syscall(libc::SYS_gettid) }.to_string();
        let mut seen = false;
        each_entry("/proc/self/task", 1 << 16, |name| {
            assert!(name != b"." && name != b"..");
            seen |= name == me.as_bytes();
            true
        })
        .unwrap();
        assert!(seen);
    }

    /// A descriptor that holds another file than the one opened is neither closed nor
    /// taken: what a program's `close_range` and `open` between ours leave.
    #[test]
    fn another_file_on_the_number_is_left_alone() {
        let fd = unsafe { libc::open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY) };
        let other = identity(fd).map(|(dev, ino)| (dev, ino + 1)).unwrap();
        assert_eq!(moved_high(fd, other), None);
        close_if(fd, other);
        assert!(identity(fd).is_some(), "still open");
        unsafe { libc::close(fd) };
    }
}
