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

use crate::own_files::{self, identity};
use std::ffi::CString;

/// Opens of the trace by its path that a program's `close_range` may undo before it gives up.
const REOPEN_TRIES: usize = 8;

pub struct TraceFd {
    fd: i32,
    dev: u64,
    ino: u64,
    path: CString,
    /// Bytes of the file that are whole writes: where a failed write is cut back to.
    length: u64,
}

impl TraceFd {
    /// Takes over `fd`, the trace just created at `path`. Its identity is the path's: by
    /// now the program may have closed `fd` and opened a file of its own on the number
    /// (the writer creates the trace while the program runs), which is then left alone
    /// and the trace opened again by its path at the first [`TraceFd::checked`].
    pub fn new(fd: i32, path: &str) -> TraceFd {
        let path = CString::new(path).unwrap_or_default();
        // SAFETY: stat is plain data; a valid C string.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let found = unsafe { libc::lstat(path.as_ptr(), &mut st) } == 0;
        let id = if found {
            Some((st.st_dev, st.st_ino))
        } else {
            identity(fd)
        };
        let fd = match id {
            Some(id) if identity(fd) == Some(id) => own_files::moved_high(fd, id).unwrap_or(fd),
            _ => -1,
        };
        TraceFd {
            fd,
            dev: id.map_or(0, |id| id.0),
            ino: id.map_or(0, |id| id.1),
            path,
            length: if found { st.st_size as u64 } else { 0 },
        }
    }

    /// The trace's path, as created.
    pub fn path(&self) -> &std::ffi::CStr {
        &self.path
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
        // The path is asked first: a replaced trace is not opened at all. Once opened, the
        // number may be the program's before it is checked (its `close_range` and `open`
        // in between): a descriptor that is not the trace is never closed here (in the
        // rare case that the file was replaced between the two, ours leaks), and the open
        // is tried again.
        for _ in 0..REOPEN_TRIES {
            // SAFETY: stat is plain data.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a valid C string; lstat is async-signal-safe.
            if unsafe { libc::lstat(self.path.as_ptr(), &mut st) } != 0
                || (st.st_dev, st.st_ino) != (self.dev, self.ino)
            {
                return None;
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
                continue;
            }
            if let Some(high) = own_files::moved_high(fd, (self.dev, self.ino)) {
                self.fd = high;
                return Some(high);
            }
        }
        None
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
