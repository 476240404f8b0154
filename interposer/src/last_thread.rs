//! A program that ends its `main` with `pthread_exit` ends when its last thread does:
//! glibc's thread start routine calls `exit(0)` when it sees the thread count reach zero.
//! vramtrace's own threads count there too, so with them the count never reaches zero
//! and the process lived on. The writer thread asks, at most every [`CHECK_EVERY_NS`]
//! (less with `VRAMTRACE_THREAD_CHECK_MS`, for tests), whether any thread of the program
//! is still alive, and when none is, ends the process the way glibc would: `exit(0)`,
//! which runs the program's exit handlers and writes the trace's end record.

use crate::{clock, own_files, settings, thread};
use std::sync::atomic::{AtomicU64, Ordering};

/// The default of [`settings::Settings::thread_check_ns`].
pub const CHECK_EVERY_NS: u64 = 50_000_000;
/// The most bytes read of a `stat` file: a line of a few hundred (a 16-byte name and
/// some 50 numbers). Reserved whole on each read, on a program's thread.
pub const STAT_MAX: usize = 4 * 1024;
/// The most bytes of `/proc/self/task` records read: some 10,000 threads.
const TASKS_MAX: usize = 256 * 1024;
static LAST_CHECK_NS: AtomicU64 = AtomicU64::new(0);

/// From the writer thread: ends the process if the program has no thread left.
pub fn exit_if_alone() {
    let now = clock::monotonic_ns();
    if now.saturating_sub(LAST_CHECK_NS.load(Ordering::Relaxed)) < settings::get().thread_check_ns {
        return;
    }
    LAST_CHECK_NS.store(now, Ordering::Relaxed);
    if program_threads_left() {
        return;
    }
    // SAFETY: what glibc itself calls when the program's last thread ends.
    unsafe { libc::exit(0) };
}

/// Whether any thread that is not vramtrace's is alive. The thread-group leader stays
/// listed, as a zombie, after `main` called `pthread_exit`: it counts in `num_threads`
/// and in `/proc/self/task`, and is told apart by its state.
fn program_threads_left() -> bool {
    // The common case costs one small read: more threads than vramtrace's and a leader.
    match num_threads() {
        Some(n) if n <= thread::ours() + 1 => {}
        _ => return true,
    }
    // Files are read outside the program's descriptor table ([`own_files`]): the
    // program may `close_range` and reuse low numbers meanwhile.
    let mut alive = false;
    let listed = own_files::each_entry("/proc/self/task", TASKS_MAX, |name| {
        let Some(tid) = std::str::from_utf8(name)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            return true;
        };
        if thread::is_ours(tid) {
            return true;
        }
        let stat = own_files::read(&format!("/proc/self/task/{tid}/stat"), STAT_MAX);
        alive = !matches!(state(&stat.unwrap_or_default()), Some(b'Z' | b'X'));
        !alive
    });
    alive || listed.is_none()
}

/// Field 20 of `/proc/self/stat`.
fn num_threads() -> Option<usize> {
    let stat = own_files::read("/proc/self/stat", STAT_MAX)?;
    let after = after_name(&stat)?;
    // After the name: state is field 3, num_threads field 20.
    let text = std::str::from_utf8(after).ok()?;
    text.split_ascii_whitespace().nth(17)?.parse().ok()
}

/// The state letter of a `stat` line.
pub(crate) fn state(stat: &[u8]) -> Option<u8> {
    after_name(stat)?
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
}

/// What follows the `(name)` field, which may itself hold spaces and parentheses.
fn after_name(stat: &[u8]) -> Option<&[u8]> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    Some(&stat[close + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_after_an_odd_name() {
        let line = b"42 (a) b (c) S 1 42 42 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 7 0 99 0\n";
        assert_eq!(state(line), Some(b'S'));
        assert_eq!(after_name(line).map(|a| a[1]), Some(b'S'));
        let zombie = b"43 (main) Z 1 2";
        assert_eq!(state(zombie), Some(b'Z'));
    }

    #[test]
    fn this_process_counts_its_threads() {
        assert!(num_threads().unwrap() >= 1);
        assert!(program_threads_left());
    }
}
