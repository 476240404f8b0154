//! The event queue between hooks and the writer: shards of plain vectors, picked by
//! thread id, so that threads rarely share a lock and a push is a short critical
//! section that never spans a real CUDA call.

use parking_lot::Mutex;
use vramtrace_schema::Event;

const SHARDS: usize = 64;

#[repr(align(128))]
struct Shard {
    events: Mutex<Vec<Event>>,
}

static QUEUE: [Shard; SHARDS] = [const {
    Shard {
        events: Mutex::new(Vec::new()),
    }
}; SHARDS];

#[inline]
pub fn push(tid: u32, event: Event) {
    QUEUE[tid as usize % SHARDS].events.lock().push(event);
}

/// Moves every queued event into `out`; each shard keeps its capacity.
pub fn drain_into(out: &mut Vec<Event>) {
    for shard in &QUEUE {
        let mut events = shard.events.lock();
        out.extend(events.drain(..));
    }
}

/// For a signal handler: drains only the shards that are not locked right now, so it can
/// never wait on a lock the interrupted code holds.
pub fn try_drain(mut each: impl FnMut(&Event)) -> usize {
    let mut n = 0;
    for shard in &QUEUE {
        if let Some(mut events) = shard.events.try_lock() {
            for e in events.iter() {
                each(e);
                n += 1;
            }
            events.clear();
        }
    }
    n
}

/// fork: hold every shard so that no thread is half-way through a push in the child.
pub fn lock_all() {
    for shard in &QUEUE {
        std::mem::forget(shard.events.lock());
    }
}

/// fork, in the parent: release what [`lock_all`] took.
pub fn unlock_all() {
    for shard in &QUEUE {
        // SAFETY: locked by lock_all in this thread, guards forgotten.
        unsafe { shard.events.force_unlock() };
    }
}

/// fork, in the child: the queued events are the parent's to write; drop them.
pub fn unlock_all_cleared() {
    for shard in &QUEUE {
        // SAFETY: locked by lock_all before fork; the child has only this thread.
        unsafe {
            (*shard.events.data_ptr()).clear();
            shard.events.force_unlock();
        }
    }
}
