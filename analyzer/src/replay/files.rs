//! The trace files of a run, a bounded number open at a time.
//!
//! Every trace is read from start to end in one merged pass, so each would hold a file
//! open for the whole replay: 128 nodes x 8 GPUs is over a thousand traces, past the
//! usual limit of 1,024 descriptors. Instead each trace reads through a [`Reopening`]
//! handle that remembers its offset; the pool keeps at most a quarter of the process's
//! descriptor limit open and closes the least recently read one to open another. A trace
//! is read in 64-KiB chunks, so reopening costs an `open` and a seek per chunk at most.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Descriptors the pool may hold at once, at least this many.
const FEWEST: usize = 8;
/// And at most this many, whatever the limit.
const MOST: usize = 512;

/// Files open now, shared by every trace of the run (parsing threads read through it too).
#[derive(Clone)]
pub struct Pool(Arc<Mutex<Open>>);

struct Open {
    limit: usize,
    /// (trace id, its file), the most recently read at the back.
    files: VecDeque<(usize, File)>,
    next_id: usize,
}

impl Pool {
    /// A pool sized by the process's soft limit on open files.
    pub fn new() -> Pool {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
        } else {
            1024
        };
        Pool::with_limit((soft / 4).clamp(FEWEST, MOST))
    }

    pub fn with_limit(limit: usize) -> Pool {
        Pool(Arc::new(Mutex::new(Open {
            limit,
            files: VecDeque::new(),
            next_id: 0,
        })))
    }

    /// Opens the regular file `path` (see [`crate::regular_file::open_regular`]) as a trace of
    /// this pool.
    pub fn open(&self, path: &Path) -> Result<Reopening, String> {
        let file = crate::regular_file::open_regular(path)?;
        let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
        let mut open = self.lock();
        let id = open.next_id;
        open.next_id += 1;
        open.make_room();
        open.files.push_back((id, file));
        Ok(Reopening {
            pool: self.clone(),
            id,
            path: path.to_path_buf(),
            offset: 0,
            identity: (meta.dev(), meta.ino()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // A panic while holding it leaves nothing half-changed that matters here.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Open {
    /// Closes the least recently read files until one more may be opened.
    fn make_room(&mut self) {
        while self.files.len() >= self.limit {
            self.files.pop_front();
        }
    }
}

/// One trace file, read from where it was left, opened again when the pool closed it.
pub struct Reopening {
    pool: Pool,
    id: usize,
    path: PathBuf,
    offset: u64,
    /// (device, inode): a file replaced between two reads is an error, not a splice.
    identity: (u64, u64),
}

impl Read for Reopening {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Taken out of the pool while it is read, so other traces read at the same time.
        let held = {
            let mut open = self.pool.lock();
            let at = open.files.iter().position(|(id, _)| *id == self.id);
            at.and_then(|i| open.files.remove(i))
        };
        let mut file = match held {
            Some((_, file)) => file,
            None => self.reopen()?,
        };
        let n = file.read(buf);
        let mut open = self.pool.lock();
        open.make_room();
        open.files.push_back((self.id, file));
        let n = n?;
        self.offset += n as u64;
        Ok(n)
    }
}

impl Reopening {
    fn reopen(&self) -> std::io::Result<File> {
        let mut file =
            crate::regular_file::open_regular(&self.path).map_err(std::io::Error::other)?;
        let meta = file.metadata()?;
        if (meta.dev(), meta.ino()) != self.identity {
            return Err(std::io::Error::other(
                "the file was replaced while it was read",
            ));
        }
        file.seek(SeekFrom::Start(self.offset))?;
        Ok(file)
    }
}

impl Drop for Reopening {
    fn drop(&mut self) {
        let mut open = self.pool.lock();
        open.files.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three files read a few bytes at a time in turn through a pool of two: each is
    /// closed and opened again at its offset over and over, and reads as it is.
    #[test]
    fn reads_every_file_whole_through_a_pool_smaller_than_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::with_limit(2);
        let contents: Vec<Vec<u8>> = (0..3u8)
            .map(|f| {
                (0..10_000u32)
                    .map(|i| (i as u8) ^ f.wrapping_mul(77))
                    .collect()
            })
            .collect();
        let mut readers: Vec<Reopening> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let path = dir.path().join(format!("{i}.jsonl"));
                std::fs::write(&path, c).unwrap();
                pool.open(&path).unwrap()
            })
            .collect();
        let mut got = vec![Vec::new(); 3];
        let mut done = [false; 3];
        while !done.iter().all(|&d| d) {
            for (i, r) in readers.iter_mut().enumerate() {
                let mut buf = [0u8; 333];
                let n = r.read(&mut buf).unwrap();
                done[i] = n == 0;
                got[i].extend_from_slice(&buf[..n]);
                assert!(pool.lock().files.len() <= 2);
            }
        }
        assert_eq!(got, contents);
    }
}
