//! An event as it waits between a hook and the writer: the fields every event has, inline,
//! and the optional ones as words after its stack in the queue's word buffer. 48 bytes
//! instead of an `Event`'s 168 (seven `Option<u64>`s of 16 bytes, nearly all `None`): less
//! to push, to drain, to sort and to carry, on every call.

use vramtrace_schema::{Api, Event, Location};

#[derive(Clone, Copy)]
pub struct Queued {
    pub t: u64,
    addr: u64,
    size: u64,
    tid: u32,
    dev: i32,
    res: i32,
    /// Where this event's words start in the word buffer: `len` return addresses, then one
    /// word per optional field present, in `Event`'s order.
    pub start: u32,
    pub len: u16,
    api: Api,
    /// Bit i: optional field i (stream, pool, handle, offset, free, total, requested,
    /// location).
    present: u8,
    /// The unload epoch of the module table the stack was taken with (saturating).
    pub epoch: u16,
}

/// `Event`'s optional fields, in the order of the `present` bits; the location (with its
/// NUMA node) as one word, present only when it is not the device.
fn optional(e: &Event) -> [Option<u64>; 8] {
    [
        e.stream,
        e.pool,
        e.handle,
        e.offset,
        e.free,
        e.total,
        e.requested,
        (e.loc != Location::Device).then(|| e.loc.to_word(e.numa)),
    ]
}

impl Queued {
    /// Packs `event`, appending `stack` and the optional values to `words`.
    #[inline]
    pub fn pack(event: &Event, stack: &[u64], epoch: u64, words: &mut Vec<u64>) -> Queued {
        let start = words.len() as u32;
        words.extend_from_slice(stack);
        let mut present = 0u8;
        for (i, v) in optional(event).into_iter().enumerate() {
            if let Some(v) = v {
                present |= 1 << i;
                words.push(v);
            }
        }
        Queued {
            t: event.t,
            addr: event.addr,
            size: event.size,
            tid: event.tid,
            dev: event.dev,
            res: event.res,
            start,
            len: stack.len() as u16,
            api: event.api,
            present,
            epoch: epoch.min(u16::MAX as u64) as u16,
        }
    }

    /// The same event, its words moved to `start` of another buffer.
    pub fn moved(&self, start: u32) -> Queued {
        Queued { start, ..*self }
    }

    /// How many words it has in the buffer.
    pub fn words(&self) -> usize {
        self.len as usize + self.present.count_ones() as usize
    }

    /// Its words, from the buffer it was packed into (empty if the buffer is not that one).
    pub fn words_in<'a>(&self, words: &'a [u64]) -> &'a [u64] {
        let start = self.start as usize;
        words.get(start..start + self.words()).unwrap_or(&[])
    }

    /// Its return addresses, innermost first.
    pub fn stack<'a>(&self, words: &'a [u64]) -> &'a [u64] {
        let own = self.words_in(words);
        own.get(..self.len as usize).unwrap_or(&[])
    }

    /// The event, with stack id 0.
    pub fn event(&self, words: &[u64]) -> Event {
        let mut e = Event::new(self.t, self.tid, self.dev, self.api, self.res);
        e.addr = self.addr;
        e.size = self.size;
        let own = self.words_in(words);
        let mut values = own.get(self.len as usize..).unwrap_or(&[]).iter().copied();
        let fields = [
            &mut e.stream,
            &mut e.pool,
            &mut e.handle,
            &mut e.offset,
            &mut e.free,
            &mut e.total,
            &mut e.requested,
        ];
        for (i, field) in fields.into_iter().enumerate() {
            if self.present & (1 << i) != 0 {
                *field = values.next();
            }
        }
        if self.present & (1 << 7) != 0 {
            (e.loc, e.numa) = Location::from_word(values.next().unwrap_or(0));
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_comes_back() {
        let mut e = Event::new(7, 8, -1, Api::CuMemMap, -5);
        e.addr = 1 << 40;
        e.size = 2 << 20;
        e.stream = Some(1);
        e.handle = Some(3);
        e.offset = Some(0);
        e.total = Some(u64::MAX);
        e.requested = Some(9);
        e.loc = Location::HostNuma;
        e.numa = Some(1);
        let mut words = vec![42, 43];
        let q = Queued::pack(&e, &[0x10, 0x20, 0x30], 0, &mut words);
        assert_eq!(std::mem::size_of::<Queued>(), 48);
        assert_eq!(q.words(), 9);
        assert_eq!(q.stack(&words), &[0x10, 0x20, 0x30]);
        assert_eq!(q.event(&words), e);
        let plain = Event::new(1, 2, 0, Api::CudaFree, 0);
        let q = Queued::pack(&plain, &[], 0, &mut words);
        assert_eq!((q.words(), q.stack(&words).len()), (0, 0));
        assert_eq!(q.event(&words), plain);
    }
}
