//! The event queue between hooks and the writer: shards of plain vectors, picked by
//! thread id, so that threads rarely share a lock and a push is a short critical
//! section that never spans a real CUDA call.
//!
//! The locks are std's futex mutexes, not parking_lot's: parking_lot keeps waiting threads
//! in a process-wide table, and a child forked while a parent thread waited inherited that
//! entry: the child's next unlock woke the parent's ghost and its own waiter slept forever.

pub use crate::queued::Queued;
use std::sync::{Mutex, MutexGuard};
use vramtrace_schema::Event;

const SHARDS: usize = 64;

struct Data {
    items: Vec<Queued>,
    /// Each item's return addresses and optional values ([`Queued`]).
    words: Vec<u64>,
    /// Bytes of this shard counted in the queue's total ([`crate::bound`]).
    accounted: usize,
}

impl Data {
    const fn new() -> Data {
        Data {
            items: Vec::new(),
            words: Vec::new(),
            accounted: 0,
        }
    }

    fn bytes(&self) -> usize {
        self.items.len() * std::mem::size_of::<Queued>() + self.words.len() * 8
    }

    fn clear(&mut self) {
        self.items.clear();
        self.words.clear();
        crate::bound::released(std::mem::take(&mut self.accounted));
    }
}

#[repr(align(128))]
struct Shard {
    data: Mutex<Data>,
}

static QUEUE: [Shard; SHARDS] = [const {
    Shard {
        data: Mutex::new(Data::new()),
    }
}; SHARDS];

/// Events in one shard that wake the writer early.
const WAKE_AT: usize = 16 * 1024;

/// Locks a shard; a panic while it was held (none is expected) does not make it unusable.
#[inline]
fn lock(shard: &'static Shard) -> MutexGuard<'static, Data> {
    shard.data.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queues `event` with its `stack`, taken with the module table of unload epoch `epoch`
/// ([`crate::dlclose::unloads`]). At the queue's bound it may wait for the writer, or count
/// the call as not recorded ([`crate::bound`]).
#[inline]
pub fn push(tid: u32, event: Event, stack: &[u64], epoch: u64) {
    if !crate::bound::room() {
        return;
    }
    let mut d = lock(&QUEUE[tid as usize % SHARDS]);
    let Data { items, words, .. } = &mut *d;
    items.push(Queued::pack(&event, stack, epoch, words));
    let full = items.len() == WAKE_AT;
    let bytes = d.bytes();
    crate::bound::account(&mut d.accounted, bytes);
    drop(d);
    if full {
        crate::lifecycle::writer_thread::wake();
    }
}

/// The writer's half of each shard: the vectors it swapped out at its last drain, cleared,
/// to be swapped in at the next.
pub struct Spares(Vec<Data>);

impl Spares {
    pub const fn new() -> Spares {
        Spares(Vec::new())
    }
}

impl Default for Spares {
    fn default() -> Spares {
        Spares::new()
    }
}

/// Moves every queued event into `items` and their words into `words`. A shard's lock is
/// held only to swap its vectors for spare ones (a thread pushing meanwhile waits for a
/// swap, not for a copy of the whole shard), and the vectors keep their capacity.
pub fn drain_into(spares: &mut Spares, items: &mut Vec<Queued>, words: &mut Vec<u64>) {
    if spares.0.len() != SHARDS {
        spares.0 = (0..SHARDS).map(|_| Data::new()).collect();
    }
    for (shard, spare) in QUEUE.iter().zip(spares.0.iter_mut()) {
        {
            let mut d = lock(shard);
            if d.items.is_empty() {
                continue;
            }
            std::mem::swap(&mut *d, spare);
        }
        crate::bound::released(std::mem::take(&mut spare.accounted));
        let offset = words.len() as u32;
        words.extend_from_slice(&spare.words);
        spare.words.clear();
        items.extend(spare.items.drain(..).map(|q| q.moved(q.start + offset)));
    }
}

/// For a signal handler: drains only the shards that are not locked right now, so it can
/// never wait on a lock the interrupted code holds. Stacks are dropped.
pub fn try_drain(mut each: impl FnMut(&Event)) -> usize {
    let mut n = 0;
    for shard in &QUEUE {
        if let Ok(mut d) = shard.data.try_lock() {
            for q in d.items.iter() {
                each(&q.event(&d.words));
                n += 1;
            }
            d.clear();
        }
    }
    n
}

/// Every shard, held across a fork by the forking thread ((`crate::lifecycle::fork`)),
/// so that no thread is half-way through a push in the child.
pub struct ForkHold(Vec<MutexGuard<'static, Data>>);

pub fn hold_for_fork() -> ForkHold {
    ForkHold(QUEUE.iter().map(lock).collect())
}

impl ForkHold {
    /// In the child: the queued events are the parent's to write; drop them.
    pub fn clear(&mut self) {
        for d in &mut self.0 {
            d.clear();
        }
        crate::bound::after_fork_child();
    }
}
