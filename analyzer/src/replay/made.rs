//! A small snapshot's events, made before the replay (`snapshots.rs`) and held until it
//! reads them: 56 bytes each where an event is 176, since a directory of snapshots holds
//! all of theirs at once. An event is packed only where unpacking gives it back exactly
//! (checked as it is packed); any other is kept whole.

use vramtrace_schema::{Api, Event};

/// The optional field besides the stream a packed event sets, if any.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Extra {
    None,
    Handle,
    Requested,
}

/// A snapshot's event: thread 0 (a snapshot names none), a stream below 2^32 if any,
/// and at most one of a handle or the requested bytes.
#[derive(Clone, Copy, Debug)]
struct Packed {
    t: u64,
    addr: u64,
    size: u64,
    stack: u64,
    extra_value: u64,
    dev: i32,
    res: i32,
    stream: u32,
    api: Api,
    extra: Extra,
    has_stream: bool,
}

enum Made {
    Packed(Packed),
    Whole(Box<Event>),
}

const _: () = assert!(std::mem::size_of::<Made>() <= 56);

impl Packed {
    fn of(e: &Event) -> Option<Packed> {
        let (extra, extra_value) = match (e.handle, e.requested) {
            (None, None) => (Extra::None, 0),
            (Some(v), None) => (Extra::Handle, v),
            (None, Some(v)) => (Extra::Requested, v),
            _ => return None,
        };
        let stream = match e.stream {
            None => None,
            Some(s) => Some(u32::try_from(s).ok()?),
        };
        let p = Packed {
            t: e.t,
            addr: e.addr,
            size: e.size,
            stack: e.stack,
            extra_value,
            dev: e.dev,
            res: e.res,
            stream: stream.unwrap_or(0),
            api: e.api,
            extra,
            has_stream: stream.is_some(),
        };
        // Whatever else the event holds (a thread, a pool, an offset, free and total bytes,
        // a host location) makes it differ from its unpacking: it stays whole.
        (p.event() == *e).then_some(p)
    }

    fn event(&self) -> Event {
        let mut e = Event::new(self.t, 0, self.dev, self.api, self.res);
        e.addr = self.addr;
        e.size = self.size;
        e.stack = self.stack;
        e.stream = self.has_stream.then_some(self.stream as u64);
        match self.extra {
            Extra::None => {}
            Extra::Handle => e.handle = Some(self.extra_value),
            Extra::Requested => e.requested = Some(self.extra_value),
        }
        e
    }
}

/// Events in the order they were pushed.
#[derive(Default)]
pub struct MadeEvents {
    events: Vec<Made>,
    /// Events kept whole, each in a box of its own.
    whole: usize,
}

impl MadeEvents {
    pub fn push(&mut self, e: Event) {
        self.events.push(match Packed::of(&e) {
            Some(p) => Made::Packed(p),
            None => {
                self.whole += 1;
                Made::Whole(Box::new(e))
            }
        });
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// The memory the events take.
    pub fn bytes(&self) -> usize {
        self.events.capacity() * std::mem::size_of::<Made>()
            + self.whole * std::mem::size_of::<Event>()
    }

    /// Done pushing: the room doubling left is given back.
    pub fn shrink(&mut self) {
        self.events.shrink_to_fit();
    }

    pub fn into_events(self) -> Unpacked {
        Unpacked(self.events.into_iter())
    }
}

/// The events, unpacked one at a time.
pub struct Unpacked(std::vec::IntoIter<Made>);

impl Iterator for Unpacked {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.0.next().map(|m| match m {
            Made::Packed(p) => p.event(),
            Made::Whole(e) => *e,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event comes back as it went in, packed or not.
    #[test]
    fn events_come_back_exactly() {
        let mut events = Vec::new();
        let mut alloc = Event::new(5, 0, 1, Api::VramtraceBlockAlloc, 0);
        alloc.addr = 0x7f00_0000_0000;
        alloc.size = 512;
        alloc.requested = Some(500);
        alloc.stream = Some(3);
        alloc.stack = 42;
        events.push(alloc);
        let mut malloc = Event::new(6, 0, 0, Api::CudaMalloc, 2);
        malloc.stream = Some(7);
        events.push(malloc);
        let mut map = Event::new(7, 0, 0, Api::CuMemMap, 0);
        map.handle = Some(9);
        map.offset = Some(0);
        events.push(map);
        let mut probe = Event::new(8, 0, 0, Api::ProbeMeminfo, 0);
        probe.free = Some(1);
        probe.total = Some(2);
        events.push(probe);
        let mut two = Event::new(9, 0, 0, Api::CudaFree, 0);
        two.handle = Some(1);
        two.requested = Some(2);
        events.push(two);
        let mut far = Event::new(10, 0, 0, Api::CudaMalloc, 0);
        far.stream = Some(1 << 40);
        events.push(far);
        let threaded = Event::new(11, 3, 0, Api::CudaFree, 0);
        events.push(threaded);
        let mut made = MadeEvents::default();
        for e in &events {
            made.push(*e);
        }
        let packed = made
            .events
            .iter()
            .filter(|m| matches!(m, Made::Packed(_)))
            .count();
        assert_eq!(
            packed, 2,
            "the block and the malloc are packed, the rest kept whole"
        );
        assert_eq!(made.into_events().collect::<Vec<_>>(), events);
    }
}
