//! Parsing on a thread of its own, a batch of lines ahead of the reader: parsing is about
//! half of what a view spends per event, so with a second CPU the view's own work runs
//! beside it. The batches are bounded: memory does not grow with the trace.

use super::lines::{Item, Lines};
use super::TraceError;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};

/// Items per batch, bytes of lines per batch (records can be long: frames with long
/// names), and batches in flight.
const BATCH: usize = 2048;
const BATCH_BYTES: usize = 1 << 20;
const IN_FLIGHT: usize = 4;

/// Readers parsing on a thread of their own now: at most one per CPU, the rest of a
/// many-file run parses in line (each file still in one place, in order). A place is held
/// until the reader is dropped, not only while its thread runs: a small file's thread is
/// over as soon as the whole file waits parsed in its batches, and a run of a thousand
/// small traces would otherwise hold every one of them parsed at once.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

pub(super) type Batch = Vec<Result<Item, TraceError>>;

/// Parses up to `items` items, or [`BATCH_BYTES`] of lines; true when nothing follows
/// them (the end, a cut last line or an error).
pub(super) fn parse_batch<R: Read>(lines: &mut Lines<R>, items: usize) -> (Batch, bool) {
    let mut batch = Vec::with_capacity(items);
    let mut last = false;
    let mut bytes = 0;
    while batch.len() < items && bytes < BATCH_BYTES && !last {
        let item = lines.item();
        bytes += lines.line.len();
        match item {
            Ok(Some(item)) => {
                last = matches!(item, Item::Truncated(_));
                batch.push(Ok(item));
            }
            Ok(None) => last = true,
            Err(e) => {
                batch.push(Err(e));
                last = true;
            }
        }
    }
    (batch, last)
}

pub struct Background {
    rx: Receiver<Batch>,
    batch: std::vec::IntoIter<Result<Item, TraceError>>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: std::path::PathBuf,
    _slot: Slot,
}

/// Releases the thread's place in [`RUNNING`] however it ends.
struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Background {
    /// Starts parsing `lines` on a thread, or hands them back when there are as many
    /// parsing threads as CPUs or no thread can be started.
    pub fn start<R: Read + Send + 'static>(lines: Lines<R>) -> Result<Background, Lines<R>> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if RUNNING.fetch_add(1, Ordering::AcqRel) >= cpus {
            RUNNING.fetch_sub(1, Ordering::AcqRel);
            return Err(lines);
        }
        let slot = Slot;
        // The lines are handed over once the thread runs, so a failed spawn keeps them.
        let (give, take) = sync_channel::<Lines<R>>(1);
        let (tx, rx) = sync_channel::<Batch>(IN_FLIGHT);
        let spawned = std::thread::Builder::new()
            .name("vramtrace-parse".into())
            .spawn(move || {
                let Ok(mut lines) = take.recv() else {
                    return;
                };
                loop {
                    let (batch, last) = parse_batch(&mut lines, BATCH);
                    // The reader was dropped, or this was the end: stop.
                    if tx.send(batch).is_err() || last {
                        return;
                    }
                }
            });
        let Ok(thread) = spawned else {
            return Err(lines);
        };
        let path = lines.path.clone();
        give.send(lines).map_err(|e| e.0)?;
        Ok(Background {
            rx,
            batch: Vec::new().into_iter(),
            thread: Some(thread),
            path,
            _slot: slot,
        })
    }

    /// The next item, in the file's order; `None` after the last.
    pub fn item(&mut self) -> Result<Option<Item>, TraceError> {
        loop {
            if let Some(item) = self.batch.next() {
                return item.map(Some);
            }
            match self.rx.recv() {
                Ok(batch) => self.batch = batch.into_iter(),
                Err(_) => {
                    // The thread ended: after the last batch, or (a bug) by a panic,
                    // which must not pass for the end of the trace.
                    let panicked = self.thread.take().is_some_and(|t| t.join().is_err());
                    if panicked {
                        return Err(TraceError {
                            path: self.path.clone(),
                            line: 0,
                            message: "the parsing thread failed; the events after the last ones read are missing".into(),
                        });
                    }
                    return Ok(None);
                }
            }
        }
    }
}
