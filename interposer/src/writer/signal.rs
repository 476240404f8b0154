//! The last write of a process killed by a fatal signal: from the signal handler, with
//! no allocation and bounded waiting.

use super::{holding, progress, State, WRITER};
use crate::{clock, output, queue};
use vramtrace_schema::{End, JsonBuf};

/// How long a fatal-signal handler waits for the writer thread to let go of the writer or
/// to create the file (a crash right after the first CUDA call comes before it), while
/// the writer makes no progress; and how long at most, progress or not. (A first write
/// names every frame: over 200 ms on a loaded machine.)
const SIGNAL_STALLED_NS: u64 = 1_000_000_000;
const SIGNAL_AT_MOST_NS: u64 = 10_000_000_000;

/// From a fatal-signal handler: no allocation, and no waiting beyond
/// [`SIGNAL_STALLED_NS`] without progress (the writer thread may itself wait for
/// something the crashed thread holds). If the writer is still busy then, or the file was
/// never opened, the events of the last flush interval are lost. `thread_started`: whether
/// a writer thread was started, which will open the file if none is open yet.
pub fn flush_from_signal(signal: i32, thread_started: bool) {
    if holding() {
        return;
    }
    let start = clock::monotonic_ns();
    let (mut seen, mut deadline) = (progress(), start + SIGNAL_STALLED_NS);
    let (mut w, fd) = loop {
        match WRITER.try_lock() {
            Ok(mut w) => match &mut w.state {
                State::Open(t) => match t.checked() {
                    Some(fd) => break (w, fd),
                    None => return,
                },
                State::Failed => return,
                State::Unopened if !thread_started => return,
                State::Unopened => {}
            },
            Err(std::sync::TryLockError::Poisoned(_)) => return,
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        let now = clock::monotonic_ns();
        if progress() != seen {
            (seen, deadline) = (progress(), now + SIGNAL_STALLED_NS);
        }
        if now >= deadline || now >= start + SIGNAL_AT_MOST_NS {
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: nanosleep is async-signal-safe; valid pointer.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    };
    let mut line = JsonBuf::new();
    let mut failed = false;
    for q in &w.carry {
        line.clear();
        q.event(&w.carry_ips).write_json(&mut line);
        failed |= output::write_all(fd, line.as_bytes()).is_err();
    }
    let carried = w.carry.len();
    let n = carried
        + queue::try_drain(|e| {
            line.clear();
            e.write_json(&mut line);
            failed |= output::write_all(fd, line.as_bytes()).is_err();
        });
    w.written += n as u64;
    let mut reason = JsonBuf::new();
    reason.raw("signal ");
    reason.u64(signal as u64);
    line.clear();
    let reason = std::str::from_utf8(reason.as_bytes()).unwrap_or("signal");
    End::write_parts(clock::now(), w.written, reason, &mut line);
    if !failed {
        let _ = output::write_all(fd, line.as_bytes());
    }
}
