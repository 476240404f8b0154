//! Parsing for a run of more traces than CPUs: a few threads shared by all its readers,
//! each reader a batch ahead. A thread of its own per trace ([`super::background`]) is
//! for the first files only (one per CPU), and a run of a thousand ranks would parse the
//! rest where the views run, one CPU for all of it.
//!
//! A reader's lines are at home (in its [`Shared`]) or with the one thread parsing its
//! next batch: parsed in order, once. A reader that needs a batch before a thread has
//! taken its turn parses it itself, so it never waits behind other readers' turns.

use super::background::{parse_batch, Batch};
use super::lines::{Item, Lines};
use super::TraceError;
use std::io::Read;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Items a reader is parsed ahead at most, by default: a run sets less where many
/// readers share its read-ahead ([`Pooled::set_batch`]).
const BATCH: usize = 2048;
const MIN_BATCH: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

/// The threads parsing for every reader made with it; they end once the pool and all its
/// readers are dropped.
#[derive(Clone)]
pub struct ParsePool {
    jobs: Sender<Job>,
}

impl ParsePool {
    /// A pool of one thread per CPU (where threads can be started: with none, readers
    /// parse in line).
    pub fn new() -> ParsePool {
        let (jobs, queue) = channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        for _ in 0..cpus {
            let queue = Arc::clone(&queue);
            let _ = std::thread::Builder::new()
                .name("vramtrace-parse".into())
                .spawn(move || work(&queue));
        }
        ParsePool { jobs }
    }
}

impl Default for ParsePool {
    fn default() -> Self {
        ParsePool::new()
    }
}

fn work(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = match lock(queue).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job();
    }
}

/// A lock that a panic elsewhere does not make unusable: what it guards is whole at
/// every unlock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct State<R> {
    /// The lines, unless a thread is parsing them (or they are read to the end).
    lines: Option<Lines<R>>,
    /// The batch parsed ahead.
    ready: Option<(Batch, bool)>,
    /// A turn is queued and not yet taken.
    queued: bool,
    /// Nothing follows the last batch parsed.
    ended: bool,
    /// The reader is dropped: a turn still queued has nothing to parse for.
    closed: bool,
}

struct Shared<R> {
    state: Mutex<State<R>>,
    parsed: Condvar,
}

/// Queues a pool thread's turn at a reader's next batch of so many items; false where no
/// thread will take it.
type Schedule = Box<dyn Fn(usize) -> bool + Send>;

pub struct Pooled<R> {
    shared: Arc<Shared<R>>,
    schedule: Schedule,
    batch: std::vec::IntoIter<Result<Item, TraceError>>,
    items: usize,
}

impl<R> Pooled<R> {
    /// Parses `items` items a batch (at least 64): what the reader holds ahead.
    pub fn set_batch(&mut self, items: usize) {
        self.items = items.clamp(MIN_BATCH, BATCH);
    }
}

impl<R: Read + Send + 'static> Pooled<R> {
    pub fn new(lines: Lines<R>, pool: &ParsePool) -> Pooled<R> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                lines: Some(lines),
                ready: None,
                queued: false,
                ended: false,
                closed: false,
            }),
            parsed: Condvar::new(),
        });
        let schedule: Schedule = {
            let shared = Arc::clone(&shared);
            let jobs = pool.jobs.clone();
            Box::new(move |items| {
                let shared = Arc::clone(&shared);
                jobs.send(Box::new(move || parse_turn(&shared, items)))
                    .is_ok()
            })
        };
        Pooled {
            shared,
            schedule,
            batch: Vec::new().into_iter(),
            items: BATCH,
        }
    }
}

impl<R: Read> Pooled<R> {
    /// The next item, in the file's order; `None` after the last.
    pub fn item(&mut self) -> Result<Option<Item>, TraceError> {
        loop {
            if let Some(item) = self.batch.next() {
                return item.map(Some);
            }
            match self.next_batch() {
                Some(batch) => self.batch = batch.into_iter(),
                None => return Ok(None),
            }
        }
    }

    /// The batch after the last one handed out, from a thread or parsed here; the next
    /// one's turn is queued.
    fn next_batch(&mut self) -> Option<Batch> {
        let mut state = lock(&self.shared.state);
        loop {
            if let Some((batch, last)) = state.ready.take() {
                state.ended |= last;
                self.queue(&mut state);
                return Some(batch);
            }
            if state.ended {
                return None;
            }
            if let Some(lines) = state.lines.take() {
                drop(state);
                let (batch, rest) = parse_caught(lines, self.items);
                state = lock(&self.shared.state);
                state.ended = rest.is_none();
                state.lines = rest;
                self.queue(&mut state);
                return Some(batch);
            }
            // A thread holds the lines: its batch comes next.
            state = self
                .shared
                .parsed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Queues a thread's turn at the next batch, unless one is queued or nothing follows.
    fn queue(&self, state: &mut State<R>) {
        if state.queued || state.ended || state.lines.is_none() {
            return;
        }
        // No thread to take it: the reader parses in line.
        state.queued = (self.schedule)(self.items);
    }
}

impl<R> Drop for Pooled<R> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        state.closed = true;
        // Its buffers go now, not when a queued turn comes round.
        let lines = state.lines.take();
        drop(state);
        // A panic in dropping the input (a bug) must not end the analysis that dropped
        // the reader: its trace is read no further either way.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(lines)));
    }
}

/// The next batch of `lines`, and the lines where more follows. A panic in parsing or in
/// dropping the lines (a bug) ends the trace with an error: it must not pass for the
/// trace's end, nor leave a reader waiting for lines no one holds.
fn parse_caught<R: Read>(mut lines: Lines<R>, items: usize) -> (Batch, Option<Lines<R>>) {
    let path = lines.path.clone();
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let (batch, last) = parse_batch(&mut lines, items);
        if last {
            drop(lines);
            (batch, None)
        } else {
            (batch, Some(lines))
        }
    }));
    parsed.unwrap_or_else(|_| {
        let error = TraceError {
            path,
            line: 0,
            message: "the parsing thread failed; the events after the last ones read are missing"
                .into(),
        };
        (vec![Err(error)], None)
    })
}

/// A thread's turn: the reader's next batch, unless the reader parsed it itself or is
/// dropped. A turn is queued only once the batch parsed ahead is taken, so none is
/// waiting here.
fn parse_turn<R: Read>(shared: &Shared<R>, items: usize) {
    let mut state = lock(&shared.state);
    state.queued = false;
    if state.closed {
        return;
    }
    let Some(lines) = state.lines.take() else {
        return;
    };
    drop(state);
    let (batch, rest) = parse_caught(lines, items);
    let mut state = lock(&shared.state);
    let last = rest.is_none();
    state.lines = rest;
    state.ready = Some((batch, last));
    drop(state);
    shared.parsed.notify_all();
}
