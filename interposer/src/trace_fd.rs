//! The trace's descriptor, which the program may close or reuse: `close_range(3, ~0)`
//! before it opens files of its own (which then get the trace's number), or `dup2` of its
//! log onto every descriptor. vramtrace wrote its JSON into the program's file and its
//! own trace stopped without an end record.
//!
//! So the descriptor is moved high (programs open low numbers first), and before every
//! write its identity is checked: `fstat` gives the device and inode the file had when it
//! was created. A descriptor that is closed or is another file is never written to, and
//! never closed (it is the program's now): the trace is opened again by its path
//! (`O_APPEND|O_NOFOLLOW`, and only if it is still the same file) and moved high again.
//! Nothing here allocates: a crash handler uses it too.

use std::ffi::CString;

pub struct TraceFd {
    fd: i32,
    dev: u64,
    ino: u64,
    path: CString,
    /// Bytes of the file that are whole writes: where a failed write is cut back to.
    length: u64,
}

fn stat(fd: i32) -> Option<libc::stat> {
    // SAFETY: stat is plain data; fstat is async-signal-safe.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
}

fn identity(fd: i32) -> Option<(u64, u64)> {
    stat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// The lowest number the trace's descriptor is moved to: high enough that a program's
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

/// Moves `fd` to a high number (close-on-exec); keeps it where it is if that fails.
fn moved_high(fd: i32) -> i32 {
    // SAFETY: fcntl and close on a descriptor this module owns.
    unsafe {
        let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, high_number());
        if high < 0 {
            return fd;
        }
        libc::close(fd);
        high
    }
}

impl TraceFd {
    /// Takes over `fd`, the trace just created at `path`.
    pub fn new(fd: i32, path: &str) -> TraceFd {
        let fd = moved_high(fd);
        let st = stat(fd);
        TraceFd {
            fd,
            dev: st.map_or(0, |st| st.st_dev),
            ino: st.map_or(0, |st| st.st_ino),
            path: CString::new(path).unwrap_or_default(),
            length: st.map_or(0, |st| st.st_size as u64),
        }
    }

    fn is_ours(&self, fd: i32) -> bool {
        identity(fd) == Some((self.dev, self.ino))
    }

    /// The descriptor to write to, opened again if the program closed or replaced it;
    /// `None` when the trace file is gone or is another file now.
    pub fn checked(&mut self) -> Option<i32> {
        if self.is_ours(self.fd) {
            return Some(self.fd);
        }
        // SAFETY: open is async-signal-safe; the path is a valid C string.
        let fd = unsafe {
            libc::open(
                self.path.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        if !self.is_ours(fd) {
            // SAFETY: the descriptor just opened here.
            unsafe { libc::close(fd) };
            return None;
        }
        self.fd = moved_high(fd);
        Some(self.fd)
    }

    /// `bytes` more were written whole.
    pub fn wrote(&mut self, bytes: usize) {
        self.length += bytes as u64;
    }

    /// After a failed write (a full disk, a file size limit): drops what it wrote of its
    /// bytes, so that the file ends with a whole line and the room the partial write
    /// took is free again for a last record.
    pub fn cut_back(&self, fd: i32) {
        // SAFETY: ftruncate and lseek on the trace's own descriptor.
        unsafe {
            libc::ftruncate(fd, self.length as libc::off_t);
            libc::lseek(fd, self.length as libc::off_t, libc::SEEK_SET);
        }
    }

    /// In a forked child: the parent's descriptor is closed, unless the number is now
    /// the program's.
    pub fn close_if_ours(&self) {
        if self.is_ours(self.fd) {
            // SAFETY: our descriptor, as its identity says.
            unsafe { libc::close(self.fd) };
        }
    }
}
