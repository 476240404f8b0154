//! The hot path shared by every wrapper.

use super::device;
use crate::guard::Depth;
use crate::stack::capture::capture;
use crate::stack::{Registers, MAX_DEPTH};
use crate::{clock, lifecycle, queue, settings, writer};
use std::panic::{catch_unwind, AssertUnwindSafe};
use vramtrace_schema::{Api, Event, Op};

/// One intercepted call, from entry to the recorded event.
pub struct Call {
    depth: Depth,
    record: bool,
    /// The hook's registers, where its stack starts.
    at: Registers,
}

impl Call {
    /// Enters the guard. Only the outermost hook on a thread records: `cudaMalloc`
    /// reaching `cuMemAlloc_v2` inside is one user call, recorded under the runtime's name.
    /// `at` is the hook's own [`here!`](crate::stack::here): the call is finished in the same
    /// hook, while its frame is there.
    #[inline]
    pub fn enter(at: Registers) -> Call {
        let depth = Depth::enter();
        let record = depth.outermost && settings::recording();
        Call { depth, record, at }
    }

    /// Records the call. `fill` sets the API-specific fields. The time is taken now, right
    /// after the real call and right before the push, for every call. (Timing frees before
    /// the call held them back by however long the call blocked - over a second on a
    /// contended driver lock - and the trace then left time order.)
    #[inline]
    pub fn finish(self, api: Api, res: i32, fill: impl FnOnce(&mut Event)) {
        if !self.record {
            return;
        }
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let t = clock::now();
            let tid = self.depth.tid();
            let mut event = Event::new(t, tid, device::current(), api, res);
            fill(&mut event);
            submit(tid, event, self.at);
        }));
    }
}

const SHORT: usize = settings::DEFAULT_STACK_DEPTH;

fn submit(tid: u32, event: Event, at: Registers) {
    let takes_memory = matches!(
        event.api.op(),
        Op::Alloc | Op::Create | Op::Reserve | Op::Map
    );
    let depth = settings::get().stack_depth;
    if depth == 0 {
        queue::push(tid, event, &[], 0);
    } else if depth <= SHORT {
        // Most runs keep the default depth: zero a short buffer, not the longest.
        let mut stack = [0u64; SHORT];
        let (n, epoch) = capture(&mut stack[..depth], at);
        queue::push(tid, event, &stack[..n], epoch);
    } else {
        let mut stack = [0u64; MAX_DEPTH];
        let (n, epoch) = capture(&mut stack[..depth], at);
        queue::push(tid, event, &stack[..n], epoch);
    }
    if takes_memory && event.res != 0 && !event.api.is_vramtrace() {
        probe_after_failure(tid, &event);
    }
    lifecycle::writer_thread::ensure_thread();
    // A failed allocation is usually followed by a crash: it reaches the file before the
    // program sees the error.
    if (takes_memory && event.res != 0) || lifecycle::sync_writes() {
        writer::flush();
    }
}

/// Right after a failed allocation, in the failing thread (its context is current): what
/// the driver says is free now, which the post-mortem compares with what was asked.
fn probe_after_failure(tid: u32, failed: &Event) {
    let Some((free, total)) = device::meminfo() else {
        return;
    };
    let mut probe = Event::new(clock::now(), tid, failed.dev, Api::ProbeMeminfo, 0);
    probe.free = Some(free);
    probe.total = Some(total);
    queue::push(tid, probe, &[], 0);
}
