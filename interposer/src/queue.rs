//! The event queue between hooks and the writer: shards of plain vectors, picked by
//! thread id, so that threads rarely share a lock and a push is a short critical
//! section that never spans a real CUDA call.

use parking_lot::Mutex;
use vramtrace_schema::Event;

const SHARDS: usize = 64;

/// An event and its raw stack: `len` return addresses from `start` in the ips buffer.
#[derive(Clone, Copy)]
pub struct Queued {
    pub event: Event,
    pub start: u32,
    pub len: u16,
}

struct Data {
    items: Vec<Queued>,
    ips: Vec<u64>,
}

#[repr(align(128))]
struct Shard {
    data: Mutex<Data>,
}

static QUEUE: [Shard; SHARDS] = [const {
    Shard {
        data: Mutex::new(Data {
            items: Vec::new(),
            ips: Vec::new(),
        }),
    }
}; SHARDS];

/// Events in one shard that wake the writer early.
const WAKE_AT: usize = 16 * 1024;

#[inline]
pub fn push(tid: u32, event: Event, stack: &[u64]) {
    let mut d = QUEUE[tid as usize % SHARDS].data.lock();
    let start = d.ips.len() as u32;
    d.ips.extend_from_slice(stack);
    d.items.push(Queued {
        event,
        start,
        len: stack.len() as u16,
    });
    let full = d.items.len() == WAKE_AT;
    drop(d);
    if full {
        crate::writer::wake();
    }
}

/// Moves every queued event into `items` and their stacks into `ips`; each shard keeps
/// its capacity.
pub fn drain_into(items: &mut Vec<Queued>, ips: &mut Vec<u64>) {
    for shard in &QUEUE {
        let mut d = shard.data.lock();
        let offset = ips.len() as u32;
        ips.extend_from_slice(&d.ips);
        d.ips.clear();
        items.extend(d.items.drain(..).map(|q| Queued {
            start: q.start + offset,
            ..q
        }));
    }
}

/// For a signal handler: drains only the shards that are not locked right now, so it can
/// never wait on a lock the interrupted code holds. Stacks are dropped.
pub fn try_drain(mut each: impl FnMut(&Event)) -> usize {
    let mut n = 0;
    for shard in &QUEUE {
        if let Some(mut d) = shard.data.try_lock() {
            for q in d.items.iter() {
                each(&q.event);
                n += 1;
            }
            d.items.clear();
            d.ips.clear();
        }
    }
    n
}

/// fork: hold every shard so that no thread is half-way through a push in the child.
pub fn lock_all() {
    for shard in &QUEUE {
        std::mem::forget(shard.data.lock());
    }
}

/// fork, in the parent: release what [`lock_all`] took.
pub fn unlock_all() {
    for shard in &QUEUE {
        // SAFETY: locked by lock_all in this thread, guards forgotten.
        unsafe { shard.data.force_unlock() };
    }
}

/// fork, in the child: the queued events are the parent's to write; drop them.
pub fn unlock_all_cleared() {
    for shard in &QUEUE {
        // SAFETY: locked by lock_all before fork; the child has only this thread.
        unsafe {
            let d = &mut *shard.data.data_ptr();
            d.items.clear();
            d.ips.clear();
            shard.data.force_unlock();
        }
    }
}
