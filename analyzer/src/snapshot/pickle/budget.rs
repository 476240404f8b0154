//! How much memory decoding may take: a bound on what a hostile file can make of its bytes.
//!
//! One byte of pickle can make far more than one byte of objects: `]` makes a 56-byte
//! object and a 16-byte stack item, `N` or `(` a stack item. A file of 2 GB of them (the
//! most read), or a small zstd file that decompresses to one, would take over 100 GB.
//! Snapshots decode to 1.4 to 12 times their size: 1.4 where a long history shares its
//! frames through the memo, 12 for the densest fixture, whose bytes are mostly frame
//! dicts of their own (a 17-byte dict becomes a 56-byte object and 96 bytes of pairs).
//! Two limits, each with its own error:
//! - [`TIMES`] the bytes read so far, plus [`FLOOR`]: twice the densest snapshot, so a
//!   file that makes far more of its bytes is stopped early, at a few hundred megabytes;
//! - three quarters of the memory free when the first snapshot was read, for what all the
//!   snapshots being decoded or kept take together (a directory's are decoded on a
//!   thread per CPU, and kept while the views stream them): a file within the first
//!   limit may still not fit, and a clear error is better than the kernel's OOM killer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// What the objects decoded may take, as a multiple of the bytes read.
pub const TIMES: usize = 24;
/// What they may take whatever was read: no small file is refused.
pub const FLOOR: usize = 64 << 20;
/// Opcodes between two checks: what they can make in between is a few megabytes.
pub const CHECK_EVERY: u32 = 1 << 14;

/// What the decoded snapshots alive in this process take (as last checked), together.
static COMMITTED: AtomicUsize = AtomicUsize::new(0);

/// One decoding's budget; what it counted leaves [`COMMITTED`] when it is dropped (with
/// the machine on an error, with the decoded pickle otherwise).
pub struct Budget {
    /// The most the objects of all decodings may take, whatever was read.
    ceiling: usize,
    /// The memory free when the first snapshot was read, for the error.
    free: Option<usize>,
    /// What this decoding added to [`COMMITTED`].
    counted: usize,
}

impl Budget {
    /// A budget within three quarters of the memory free when the process first asked.
    pub fn of_this_machine() -> Budget {
        static FREE: OnceLock<Option<usize>> = OnceLock::new();
        Budget::within(*FREE.get_or_init(free_memory))
    }

    /// A budget within `free` bytes (`None`: no limit but [`TIMES`]).
    pub fn within(free: Option<usize>) -> Budget {
        let ceiling = free.map_or(usize::MAX, |f| (f / 4 * 3).max(FLOOR));
        Budget {
            ceiling,
            free,
            counted: 0,
        }
    }

    /// Why `made` bytes of objects from `read` bytes of pickle, and `copying` more for an
    /// argument about to be copied, are too many, if they are.
    pub fn check(&mut self, made: usize, copying: usize, read: usize) -> Result<(), String> {
        let take = if copying > 0 {
            format!(
                "would take, with the argument being read, {}",
                bytes(made + copying)
            )
        } else {
            format!("take {}", bytes(made))
        };
        let made = made.saturating_add(copying);
        let times = FLOOR.saturating_add(read.saturating_mul(TIMES));
        if made > times {
            return Err(format!(
                "the objects decoded so far {take}, more than {TIMES} times the {} of pickle \
                 read, far more than any snapshot makes of its bytes: refused before it \
                 exhausts memory",
                bytes(read)
            ));
        }
        // The change, up or down, as a wrapping difference.
        let change = made.wrapping_sub(self.counted);
        let all = COMMITTED
            .fetch_add(change, Ordering::Relaxed)
            .wrapping_add(change);
        self.counted = made;
        if all > self.ceiling {
            let others = all.saturating_sub(made);
            let with = if others > 0 {
                format!(" with the other snapshots read ({})", bytes(others))
            } else {
                String::new()
            };
            return Err(format!(
                "the objects decoded so far {take}{with}, more than three quarters of the \
                 {} of memory free when reading began: refused before it exhausts memory \
                 (read it where more memory is free)",
                bytes(self.free.unwrap_or(self.ceiling))
            ));
        }
        Ok(())
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        COMMITTED.fetch_sub(self.counted, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Budget {
    /// Nothing of the decoding's own: two readings of one file compare equal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Budget")
    }
}

fn bytes(n: usize) -> String {
    crate::units::bytes(n as u64)
}

/// Memory this process may still take: what the kernel counts as available, less where
/// an address-space limit leaves less, or where the process's cgroup (a container's, seen
/// at /sys/fs/cgroup in its namespace, cgroup v2) has less room left under its limit. The
/// cgroup's inactive file cache counts as room, as the kernel reclaims it first (a
/// snapshot just copied in would otherwise leave none).
fn free_memory() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let available = meminfo
        .as_deref()
        .and_then(|m| kib_field(m, "MemAvailable:"));
    let number =
        |path: &str| -> Option<usize> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let cache = || -> Option<usize> {
        let stat = std::fs::read_to_string("/sys/fs/cgroup/memory.stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("inactive_file "))?;
        line.split_ascii_whitespace().nth(1)?.parse().ok()
    };
    let cgroup = number("/sys/fs/cgroup/memory.max").map(|max| {
        let used = number("/sys/fs/cgroup/memory.current").unwrap_or(0);
        max.saturating_sub(used.saturating_sub(cache().unwrap_or(0)))
    });
    [available, cgroup, address_space_left()]
        .into_iter()
        .flatten()
        .min()
}

/// Where an address-space limit is set (`ulimit -v`): what is left under it, so that the
/// budget's error comes before an allocation fails (which aborts).
fn address_space_left() -> Option<usize> {
    // SAFETY: rlimit is plain data, filled by getrlimit.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let size = kib_field(&status, "VmSize:")?;
    Some((limit.rlim_cur as usize).saturating_sub(size))
}

/// A `Key:   N kB` line of a /proc file (meminfo, status), in bytes.
fn kib_field(text: &str, key: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by each test here that counts decodings: they share [`COMMITTED`], and one's
    /// gigabyte alongside another's would break the other's ceiling.
    fn alone() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    impl Budget {
        fn check_made(&mut self, made: usize, read: usize) -> Result<(), String> {
            self.check(made, 0, read)
        }
    }

    #[test]
    fn a_small_file_may_make_the_floor_whatever_it_is() {
        let _alone = alone();
        let mut b = Budget::within(None);
        assert!(b.check_made(FLOOR, 0).is_ok());
        assert!(b.check_made(FLOOR + 1, 0).is_err());
        assert!(b.check_made(FLOOR + TIMES * 1000, 1000).is_ok());
        assert!(b.check_made(FLOOR + TIMES * 1000 + 1, 1000).is_err());
    }

    // Other tests decode small pickles meanwhile: they add at most a few megabytes to
    // what all decodings take, hence the margins.
    #[test]
    fn past_three_quarters_of_the_free_memory_is_refused_with_its_own_reason() {
        let _alone = alone();
        let free = 1usize << 30;
        let mut b = Budget::within(Some(free));
        let read = 100 << 20;
        assert!(b.check_made(free / 4 * 3 - (64 << 20), read).is_ok());
        let e = b.check_made(free / 4 * 3 + 1, read).unwrap_err();
        assert!(e.contains("three quarters of the 1.0 GiB"), "{e}");
        let e = b.check_made(FLOOR + 1, 0).unwrap_err();
        assert!(e.contains("more than 24 times"), "{e}");
    }

    #[test]
    fn the_decodings_alive_share_the_ceiling_and_a_dropped_one_gives_its_share_back() {
        let _alone = alone();
        let free = 4usize << 30;
        let share = free / 8 * 3;
        let mut first = Budget::within(Some(free));
        assert!(first.check_made(share, share).is_ok());
        let mut second = Budget::within(Some(free));
        assert!(second.check_made(share - (64 << 20), share).is_ok());
        let e = second.check_made(share + (64 << 20), share).unwrap_err();
        assert!(e.contains("with the other snapshots read"), "{e}");
        drop(first);
        assert!(second.check_made(share + (64 << 20), share).is_ok());
    }

    #[test]
    fn a_proc_field_is_read_in_kibibytes() {
        let text = "MemTotal:       24683664 kB\nMemFree:        14014492 kB\nMemAvailable:   23643000 kB\n";
        assert_eq!(kib_field(text, "MemAvailable:"), Some(23_643_000 * 1024));
        assert_eq!(kib_field("MemTotal: 1 kB\n", "MemAvailable:"), None);
    }
}
