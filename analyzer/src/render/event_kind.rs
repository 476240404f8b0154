//! The kind of memory an event deals in, as the exports write it: a free's is its
//! allocation's, which a free of host or managed pool memory does not say itself.

use crate::model::Map;
use vramtrace_schema::{Event, Kind, Op};

#[derive(Default)]
pub struct EventKinds {
    /// Live allocations whose location made them host or managed pool memory, by process
    /// and address (handle for `cuMemCreate`): their frees carry no location, and their
    /// rows take the kind of what they give back from here.
    off_device: Map<(usize, u64), Kind>,
}

impl EventKinds {
    /// The kind of memory the event deals in: a free's is its allocation's.
    pub fn of(&mut self, process: usize, e: &Event) -> Kind {
        let key = |addr_or_handle: u64| (process, addr_or_handle);
        match e.api.op() {
            Op::Alloc if e.ok() && e.kind() != e.api.kind() => {
                self.off_device.insert(key(e.addr), e.kind());
            }
            Op::Create if e.ok() && e.kind() != e.api.kind() => {
                self.off_device.insert(key(e.handle.unwrap_or(0)), e.kind());
            }
            // Most runs have no such memory: no look-up for every free then.
            Op::Free if e.ok() && !self.off_device.is_empty() => {
                return self.off_device.remove(&key(e.addr)).unwrap_or(e.kind())
            }
            Op::Release if e.ok() && !self.off_device.is_empty() => {
                let handle = e.handle.unwrap_or(0);
                return self.off_device.remove(&key(handle)).unwrap_or(e.kind());
            }
            _ => {}
        }
        e.kind()
    }
}
