//! The writer: drains the queue, formats events and writes them to the trace file. Who
//! calls it, and when (its own thread every flush interval, a hook after a failed
//! allocation, the thread that ends the process), is the process's lifecycle
//! (`crate::lifecycle`); the writer only writes.

mod lock;
mod records;
mod signal;

pub use lock::{holding, lock, try_lock, Locked};
pub use signal::flush_from_signal;

use crate::queue::{self, Queued};
use crate::stack::intern::{self, Interner};
use crate::stack::symbolize::Symbolizer;
use crate::trace_fd::TraceFd;
use crate::{clock, output, warn};
use records::{failure, write_node, WRITE_CHUNK};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use vramtrace_schema::{End, JsonBuf};

enum State {
    /// No file yet: it is created with the first flush that has something to write, so a
    /// process that never touches device memory leaves no trace file.
    Unopened,
    Open(TraceFd),
    /// Creating or writing failed: warned once, events are dropped from now on.
    Failed,
}

pub struct Writer {
    state: State,
    written: u64,
    batch: Vec<Queued>,
    /// The batch's words: return addresses and optional values ([`Queued`]).
    ips: Vec<u64>,
    spares: queue::Spares,
    /// Events newer than the last flush's cut, held for the next one (with their stacks).
    carry: Vec<Queued>,
    carry_ips: Vec<u64>,
    text: Vec<u8>,
    /// Stacks already in this file (reset with the file after fork).
    stacks: Option<Interner>,
    symbols: Option<Symbolizer>,
    /// Marker names already in this file.
    names_written: u64,
    /// Calls not recorded ([`crate::bound::lost`]) already counted in this file.
    lost_written: u64,
}

static WRITER: Mutex<Writer> = Mutex::new(Writer {
    state: State::Unopened,
    written: 0,
    batch: Vec::new(),
    ips: Vec::new(),
    spares: queue::Spares::new(),
    carry: Vec::new(),
    carry_ips: Vec::new(),
    text: Vec::new(),
    stacks: None,
    symbols: None,
    names_written: 0,
    lost_written: 0,
});

/// Writes everything queued so far.
pub fn flush() {
    lock().flush(None);
}

/// Writes every event timed before now, for the program that asks for its trace so far
/// (`vramtrace_flush`), and says where it is. Cut at now, as the writer thread's flush is:
/// another thread's events drained from a later shard are newer, and kept for the next.
pub fn flush_to_now() -> Option<Result<Vec<u8>, ()>> {
    let mut w = lock();
    w.flush(Some(clock::now()));
    w.trace_path().map(|p| p.map(|p| p.to_bytes().to_vec()))
}

/// The writer thread's periodic flush: writes the events timed before it started and
/// keeps newer ones for the next flush. Draining 64 shards takes a while on a busy
/// machine (the writer can be preempted half-way); without the cut, a shard drained late
/// brings events newer than those of a shard drained early in the next flush, and the
/// file leaves time order by as long as the preemption lasted.
pub fn flush_periodic() {
    lock().flush(Some(clock::now()));
}

/// Steps the writer has made (events and frames formatted, shards drained, writes
/// done): tells a busy writer from a stuck one.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

fn progressed() {
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

/// The writer's progress count: it changes while the writer works.
pub fn progress() -> u64 {
    PROGRESS.load(Ordering::Relaxed)
}

impl Writer {
    /// Writes everything queued, then the end record.
    pub fn finish(&mut self, reason: &str) {
        self.flush(None);
        if let State::Open(_) = self.state {
            let end = End {
                t: clock::now(),
                events: self.written,
                reason: reason.to_string(),
                queue_peak_bytes: Some(crate::bound::peak()),
            };
            let mut line = JsonBuf::new();
            end.write_json(&mut line);
            self.write(line.as_bytes());
        }
    }

    /// The trace's path: `None` before anything was written, `Err` once writing failed.
    fn trace_path(&self) -> Option<Result<&std::ffi::CStr, ()>> {
        match &self.state {
            State::Unopened => None,
            State::Open(file) => Some(Ok(file.path())),
            State::Failed => Some(Err(())),
        }
    }

    /// In a forked child: the file, the stacks and the counts are the parent's; the
    /// child's trace starts afresh with its first event.
    pub fn reset_in_child(&mut self) {
        if let State::Open(file) = &self.state {
            // The parent's descriptor, not the child's to write.
            file.close_if_ours();
        }
        self.state = State::Unopened;
        self.written = 0;
        self.stacks = None;
        self.names_written = 0;
        self.lost_written = 0;
        // Held-back events are the parent's to write.
        self.carry.clear();
        self.carry_ips.clear();
    }

    /// Writes the queued events timed at or before `cut` (all with `None`).
    fn flush(&mut self, cut: Option<u64>) {
        let mut batch = std::mem::take(&mut self.batch);
        let mut ips = std::mem::take(&mut self.ips);
        ips.extend_from_slice(&self.carry_ips);
        batch.append(&mut self.carry);
        self.carry_ips.clear();
        queue::drain_into(&mut self.spares, &mut batch, &mut ips);
        progressed();
        batch.sort_by_key(|q| q.t);
        progressed();
        let keep = cut.map_or(batch.len(), |cut| batch.partition_point(|q| q.t <= cut));
        for q in &batch[keep..] {
            let start = self.carry_ips.len() as u32;
            self.carry_ips.extend_from_slice(q.words_in(&ips));
            self.carry.push(q.moved(start));
        }
        batch.truncate(keep);
        if !batch.is_empty() || crate::bound::lost() > self.lost_written {
            self.write_events(&mut batch, &ips);
        }
        batch.clear();
        ips.clear();
        self.batch = batch;
        self.ips = ips;
    }

    fn write_events(&mut self, batch: &mut [Queued], ips: &[u64]) {
        match self.state {
            State::Open(_) => {}
            State::Failed => return,
            State::Unopened => match crate::trace_file::open() {
                Ok(file) => self.state = State::Open(file),
                Err(msg) => {
                    self.state = State::Failed;
                    warn::once(&msg);
                    return;
                }
            },
        }
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        let lost = crate::bound::lost();
        if lost > self.lost_written {
            let mut line = JsonBuf::new();
            vramtrace_schema::Lost {
                t: clock::now(),
                calls: lost - self.lost_written,
            }
            .write_json(&mut line);
            text.extend_from_slice(line.as_bytes());
            self.lost_written = lost;
        }
        for (id, text_of) in crate::annotate::names_after(self.names_written) {
            vramtrace_schema::Name { id, text: text_of }.write_json(&mut text);
            self.names_written = id;
        }
        // Out of the writer while it writes in chunks; put back below.
        let mut stacks = self.stacks.take().unwrap_or_default();
        let mut symbols = self.symbols.take().unwrap_or_default();
        let mut formatted = 0u64;
        // Each stack is tagged with the unload epoch it was taken in; `dlclose` writes
        // what is queued before it unloads, so nearly all are named while still mapped.
        let now = crate::dlclose::unloads();
        let mut tagged = Vec::new();
        for q in batch.iter() {
            let mut e = q.event(ips);
            if q.len > 0 {
                let mut frames = q.stack(ips);
                let epoch = q.epoch as u64;
                if epoch > 0 {
                    tagged.clear();
                    tagged.extend(frames.iter().map(|&ip| intern::tagged(ip, epoch)));
                    frames = &tagged;
                }
                // A stack taken before an unload that came since: its addresses may now
                // be another library's, so its native frames are left unnamed.
                let current = epoch == now.min(u16::MAX as u64);
                e.stack = stacks.intern(frames, |node| {
                    write_node(&mut text, &mut symbols, &node, current)
                });
            }
            e.write_json(&mut text);
            formatted += 1;
            progressed();
            // Bounded writes: the text of a large batch is not held whole, and no write
            // is so large that a fork (which waits for the writer) waits long behind it.
            if text.len() >= WRITE_CHUNK {
                if !self.write(&text) {
                    break;
                }
                self.written += std::mem::take(&mut formatted);
                text.clear();
            }
        }
        if !text.is_empty() && self.write(&text) {
            self.written += formatted;
        }
        text.clear();
        self.text = text;
        self.stacks = Some(stacks);
        self.symbols = Some(symbols);
    }

    /// Writes to the trace file, after checking the descriptor is still the trace's.
    fn write(&mut self, bytes: &[u8]) -> bool {
        let State::Open(file) = &mut self.state else {
            return false;
        };
        let Some(fd) = file.checked() else {
            self.state = State::Failed;
            warn::once("the trace file was closed by the program and is gone or replaced: no more events are written");
            return false;
        };
        let written = output::write_all(fd, bytes);
        progressed();
        match written {
            Ok(()) => {
                file.wrote(bytes.len());
                true
            }
            Err(e) => {
                // The writer knows why the trace stops here: it says so in a last end
                // record (a trace without one reads as a killed process), after cutting
                // the failed write back so that the record has room and follows a whole
                // line. One try: if even that fails, the trace ends at its last whole line.
                file.cut_back(fd);
                let mut line = JsonBuf::new();
                End {
                    t: clock::now(),
                    events: self.written,
                    reason: format!("write failed: {}", failure(&e)),
                    queue_peak_bytes: Some(crate::bound::peak()),
                }
                .write_json(&mut line);
                let _ = output::write_all(fd, line.as_bytes());
                self.state = State::Failed;
                warn::once(&format!("cannot write the trace: {e}"));
                false
            }
        }
    }
}
