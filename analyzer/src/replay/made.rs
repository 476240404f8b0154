//! A small snapshot's events, made before the replay (`snapshots.rs`) and held until it
//! reads them: about 13 bytes each where an event is 176, since a directory of snapshots
//! holds all of theirs at once. An event is packed only where unpacking gives it back
//! exactly (checked as it is packed), as variable-length integers, its time, address
//! and stack as the change from the event before (a history's neighbours are close);
//! any other is kept whole.

use integer_encoding::VarInt;
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

/// The fields an event's packed form changes from one event to the next.
#[derive(Clone, Copy, Default)]
struct Previous {
    t: u64,
    addr: u64,
    stack: u64,
}

/// The first number of an event kept whole (the rest: 1 + [`Packed::code`]).
const WHOLE: u64 = 0;

impl Packed {
    /// The API's index in the table, the optional field and whether there is a stream.
    fn code(&self) -> u64 {
        let api = self.api as u64;
        let extra = match self.extra {
            Extra::None => 0,
            Extra::Handle => 1,
            Extra::Requested => 2,
        };
        (api << 3) | (extra << 1) | u64::from(self.has_stream)
    }

    fn write(&self, out: &mut Vec<u8>, previous: &mut Previous) {
        put(out, 1 + self.code());
        put(out, self.t.wrapping_sub(previous.t) as i64);
        put(out, self.addr.wrapping_sub(previous.addr) as i64);
        put(out, self.size);
        put(out, self.stack.wrapping_sub(previous.stack) as i64);
        put(out, self.dev);
        put(out, self.res);
        if self.has_stream {
            put(out, self.stream);
        }
        if self.extra != Extra::None {
            put(out, self.extra_value);
        }
        *previous = Previous {
            t: self.t,
            addr: self.addr,
            stack: self.stack,
        };
    }

    /// The event after the code `code`, read from `r`.
    fn read(code: u64, r: &mut Reader, previous: &mut Previous) -> Option<Packed> {
        let api = *Api::ALL.get(usize::try_from(code >> 3).ok()?)?;
        let extra = match (code >> 1) & 3 {
            0 => Extra::None,
            1 => Extra::Handle,
            2 => Extra::Requested,
            _ => return None,
        };
        let has_stream = code & 1 == 1;
        let t = previous.t.wrapping_add(r.get::<i64>()? as u64);
        let addr = previous.addr.wrapping_add(r.get::<i64>()? as u64);
        let size = r.get()?;
        let stack = previous.stack.wrapping_add(r.get::<i64>()? as u64);
        let dev = r.get()?;
        let res = r.get()?;
        let stream = if has_stream { r.get()? } else { 0 };
        let extra_value = if extra != Extra::None { r.get()? } else { 0 };
        *previous = Previous { t, addr, stack };
        Some(Packed {
            t,
            addr,
            size,
            stack,
            extra_value,
            dev,
            res,
            stream,
            api,
            extra,
            has_stream,
        })
    }
}

fn put<T: VarInt>(out: &mut Vec<u8>, v: T) {
    let mut buf = [0u8; 10];
    let n = v.encode_var(&mut buf);
    out.extend_from_slice(&buf[..n]);
}

struct Reader {
    bytes: Vec<u8>,
    at: usize,
}

impl Reader {
    fn get<T: VarInt>(&mut self) -> Option<T> {
        let (v, n) = T::decode_var(self.bytes.get(self.at..)?)?;
        self.at += n;
        Some(v)
    }
}

/// Events in the order they were pushed.
#[derive(Default)]
pub struct MadeEvents {
    /// Each event's numbers, packed.
    packed: Vec<u8>,
    /// Events kept whole, in their order.
    whole: Vec<Event>,
    len: usize,
    previous: Previous,
}

impl MadeEvents {
    pub fn push(&mut self, e: Event) {
        match Packed::of(&e) {
            Some(p) => p.write(&mut self.packed, &mut self.previous),
            None => {
                put(&mut self.packed, WHOLE);
                self.whole.push(e);
            }
        }
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The memory the events take.
    pub fn bytes(&self) -> usize {
        self.packed.capacity() + self.whole.capacity() * std::mem::size_of::<Event>()
    }

    /// Done pushing: the room doubling left is given back.
    pub fn shrink(&mut self) {
        self.packed.shrink_to_fit();
        self.whole.shrink_to_fit();
    }

    pub fn into_events(self) -> Unpacked {
        Unpacked {
            reader: Reader {
                bytes: self.packed,
                at: 0,
            },
            whole: self.whole.into_iter(),
            left: self.len,
            previous: Previous::default(),
        }
    }
}

/// The events, unpacked one at a time.
pub struct Unpacked {
    reader: Reader,
    whole: std::vec::IntoIter<Event>,
    left: usize,
    previous: Previous,
}

impl Iterator for Unpacked {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let code: u64 = self.reader.get()?;
        let event = if code == WHOLE {
            self.whole.next()
        } else {
            Packed::read(code - 1, &mut self.reader, &mut self.previous).map(|p| p.event())
        };
        // Only what `push` wrote is read: an event that does not read back is a bug here,
        // never the input's.
        debug_assert!(event.is_some(), "a made event did not read back");
        event
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
        assert_eq!(
            made.whole.len(),
            events.len() - 2,
            "the block and the malloc are packed, the rest kept whole"
        );
        assert_eq!(made.into_events().collect::<Vec<_>>(), events);
    }

    /// Drawn events, with times and addresses that jump both ways and extreme values,
    /// come back exactly, in their order, whole ones among them.
    #[test]
    fn drawn_events_come_back_exactly() {
        let mut rng = fastrand::Rng::with_seed(25);
        let mut events = Vec::new();
        let wide = |rng: &mut fastrand::Rng| match rng.u8(0..4) {
            0 => 0,
            1 => u64::MAX - rng.u64(0..4),
            2 => rng.u64(0..1 << 20),
            _ => rng.u64(..),
        };
        for _ in 0..20_000 {
            let api = Api::ALL[rng.usize(0..Api::ALL.len())];
            let dev = match rng.u8(0..3) {
                0 => -1,
                1 => i32::MIN,
                _ => rng.i32(0..8),
            };
            let mut e = Event::new(wide(&mut rng), 0, dev, api, rng.i32(..));
            e.addr = wide(&mut rng);
            e.size = wide(&mut rng);
            e.stack = wide(&mut rng);
            match rng.u8(0..5) {
                0 => e.requested = Some(wide(&mut rng)),
                1 => e.handle = Some(wide(&mut rng)),
                2 => e.stream = Some(rng.u64(0..1 << 33)),
                3 => e.tid = rng.u32(1..),
                _ => {}
            }
            events.push(e);
        }
        let mut made = MadeEvents::default();
        for e in &events {
            made.push(*e);
        }
        assert_eq!(made.len(), events.len());
        assert!(!made.whole.is_empty() && made.whole.len() < events.len() / 2);
        assert_eq!(made.into_events().collect::<Vec<_>>(), events);
    }
}
