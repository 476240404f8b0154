//! A large snapshot's events made on a thread of their own, in batches, while the replay
//! runs on the caller's: turning history entries into events (frames into stacks, block
//! sizes off the segments' layout) costs about what replaying them does, so the two
//! overlap as a trace's parsing and replay do. Small snapshots have their events made
//! before the replay (`snapshots.rs`, `made.rs`); large ones past the first few of a run
//! are read inline: a thread and its batches per file would cost more than they save.

use crate::model::{Category, Map, TensorCategories};
use crate::snapshot::events::SnapshotEvents;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;
use vramtrace_schema::{End, Event, StackTable};

/// Events per batch, and batches made ahead of the replay: a few MB per snapshot.
const BATCH: usize = 4096;
const AHEAD: usize = 2;

/// Below this many history entries a snapshot is read inline.
pub const THREAD_ENTRIES: usize = 1 << 16;

/// Events made on the thread, with the categories of the stacks they made.
type Batch = (Vec<Event>, Vec<(u64, Category)>);

pub struct Feed {
    state: State,
    /// Events handed out, and the time of the last: what the end record says, whatever the
    /// thread read ahead.
    count: u64,
    last_t: Option<u64>,
}

enum State {
    Inline(Box<SnapshotEvents>),
    /// Every event made already (`snapshots.rs`), and the source for its stacks and end.
    Made {
        events: super::made::Unpacked,
        source: Box<SnapshotEvents>,
    },
    Thread {
        batch: std::vec::IntoIter<Event>,
        /// Each batch with the categories of the stacks its events made.
        batches: Receiver<Batch>,
        /// The categories of the batches received, not yet learned.
        categories: Vec<(u64, Category)>,
        thread: JoinHandle<Option<SnapshotEvents>>,
    },
    /// The thread is joined: the source, for its stacks and end.
    Joined(Box<SnapshotEvents>),
    /// Between states in `finish`, or a thread that never received its source.
    Moving,
}

impl Feed {
    /// Reads `snap` on a thread of its own where `threaded` and a thread can be started,
    /// inline otherwise.
    pub fn new(snap: SnapshotEvents, threaded: bool) -> Feed {
        let state = if threaded {
            spawn(snap)
        } else {
            State::Inline(Box::new(snap))
        };
        Feed::of(state)
    }

    /// `snap`, whose events are `made` already.
    pub fn made(snap: SnapshotEvents, made: super::made::MadeEvents) -> Feed {
        Feed::of(State::Made {
            events: made.into_events(),
            source: Box::new(snap),
        })
    }

    fn of(state: State) -> Feed {
        Feed {
            state,
            count: 0,
            last_t: None,
        }
    }

    pub fn next_event(&mut self) -> Option<Event> {
        let e = match &mut self.state {
            State::Inline(snap) => snap.next_event(),
            State::Made { events, .. } => events.next(),
            State::Thread {
                batch,
                batches,
                categories,
                ..
            } => loop {
                if let Some(e) = batch.next() {
                    break Some(e);
                }
                match batches.recv() {
                    Ok((b, learned)) => {
                        *batch = b.into_iter();
                        categories.extend(learned);
                    }
                    Err(_) => {
                        self.finish();
                        break None;
                    }
                }
            },
            State::Joined(_) | State::Moving => None,
        };
        if let Some(e) = &e {
            self.count += 1;
            self.last_t = Some(e.t);
        }
        e
    }

    /// The source once its thread is over: stopped where the replay stopped reading.
    fn finish(&mut self) {
        let thread = match std::mem::replace(&mut self.state, State::Moving) {
            State::Thread { thread, .. } => thread,
            other => {
                self.state = other;
                return;
            }
        };
        // The receiver went with the state above: a thread waiting to send stops.
        self.state = match thread.join() {
            Ok(Some(snap)) => State::Joined(Box::new(snap)),
            Ok(None) => State::Moving,
            // A panic there is one here, as it was when the events were read here.
            Err(panic) => std::panic::resume_unwind(panic),
        };
    }

    fn source(&mut self) -> Option<&mut SnapshotEvents> {
        self.finish();
        match &mut self.state {
            State::Inline(snap) | State::Joined(snap) => Some(snap),
            State::Made { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The stacks of the events handed out, and their categories, taken.
    pub fn take_stacks(&mut self) -> (StackTable, TensorCategories) {
        self.source().map(|s| s.take_stacks()).unwrap_or_default()
    }

    /// Adds to `into` the categories of the stacks of the events handed out so far.
    pub fn learn_categories(&mut self, into: &mut Map<u64, Category>) {
        match &mut self.state {
            State::Thread { categories, .. } => into.extend(categories.drain(..)),
            _ => {
                if let Some(s) = self.source() {
                    s.learn_categories(into);
                }
            }
        }
    }

    /// What the views say of the snapshot, once its events are read.
    pub fn facts(&mut self) -> Option<crate::snapshot::events::SnapshotFacts> {
        Some(self.source()?.facts())
    }

    /// The end record, counting the events handed out (not those read ahead).
    pub fn end(&mut self) -> Option<End> {
        let (count, last_t) = (self.count, self.last_t);
        Some(self.source()?.end(count, last_t))
    }
}

/// `snap` read on a new thread; inline where none can be started.
fn spawn(snap: SnapshotEvents) -> State {
    let (give, take) = sync_channel::<SnapshotEvents>(1);
    let (send, batches) = sync_channel::<Batch>(AHEAD);
    let started = std::thread::Builder::new()
        .name("snapshot-events".into())
        .spawn(move || {
            // The source comes through a channel so that it stays here if no thread starts.
            let mut snap = take.recv().ok()?;
            loop {
                let mut batch = Vec::with_capacity(BATCH);
                while batch.len() < BATCH {
                    match snap.next_event() {
                        Some(e) => batch.push(e),
                        None => break,
                    }
                }
                let last = batch.len() < BATCH;
                let mut learned = Map::default();
                snap.learn_categories(&mut learned);
                let learned = learned.into_iter().collect();
                // A closed receiver: the replay stopped reading.
                if (!batch.is_empty() && send.send((batch, learned)).is_err()) || last {
                    return Some(snap);
                }
            }
        });
    match started {
        // The thread holds its receiver until the source arrives: this send is taken.
        Ok(thread) => match give.send(snap) {
            Ok(()) => State::Thread {
                batch: Vec::new().into_iter(),
                batches,
                categories: Vec::new(),
                thread,
            },
            Err(back) => State::Inline(Box::new(back.0)),
        },
        Err(_) => State::Inline(Box::new(snap)),
    }
}
