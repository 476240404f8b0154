//! What was alive before a device's history, as the events a trace would hold: its
//! segments (the reserved layer), then their tensors, all at the history's first time.
//! Made one at a time as the replay asks: a segment-heavy snapshot starts with a hundred
//! thousand live tensors, and an expandable segment is thousands of pages, where an event
//! is 200 bytes and what makes it 32.

use crate::allocator::expandable::page_size;
use crate::allocator::start::Start;
use crate::model::Map;
use vramtrace_schema::{Api, Event};

struct Reserve {
    addr: u64,
    size: u64,
    stream: u64,
    /// The page of an expandable segment (its pages are mapped one handle each).
    page: Option<u64>,
}

struct Tensor {
    addr: u64,
    size: u64,
    requested: u64,
    stack: u64,
}

/// The events of a device's start, in order: every segment, then every tensor.
pub struct StartEvents {
    t: u64,
    dev: i32,
    segments: Vec<Reserve>,
    tensors: Vec<Tensor>,
    /// Where the next event comes from: segment, its piece, the half of a page's pair
    /// (`cuMemCreate`, then `cuMemMap`); then the tensor.
    segment: usize,
    piece: u64,
    mapped: bool,
    tensor: usize,
}

impl StartEvents {
    /// The start's events at time `t`; `stacks` and `freed_stacks` are the stacks of its
    /// tensors by address (those the history frees, from labels alone).
    pub fn new(
        start: &Start,
        t: u64,
        dev: i32,
        stacks: &Map<u64, u64>,
        freed_stacks: &Map<u64, u64>,
    ) -> StartEvents {
        let segments = start
            .segments
            .iter()
            .map(|s| Reserve {
                addr: s.addr,
                size: s.size,
                stream: s.stream,
                page: s.expandable.then(|| page_size(s.pool)),
            })
            .collect();
        let tensors = start
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .map(|b| Tensor {
                addr: b.addr,
                size: b.size,
                requested: b.requested,
                stack: match b.freed_inside {
                    true => freed_stacks.get(&b.addr).copied().unwrap_or(0),
                    false => stacks.get(&b.addr).copied().unwrap_or(0),
                },
            })
            .collect();
        StartEvents {
            t,
            dev,
            segments,
            tensors,
            segment: 0,
            piece: 0,
            mapped: false,
            tensor: 0,
        }
    }
}

impl Iterator for StartEvents {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        let (t, dev) = (self.t, self.dev);
        while let Some(s) = self.segments.get(self.segment) {
            let Some(page) = s.page else {
                self.segment += 1;
                let mut e = Event::new(t, 0, dev, Api::CudaMalloc, 0);
                e.addr = s.addr;
                e.size = s.size;
                e.stream = Some(s.stream);
                return Some(e);
            };
            let (pieces, piece) = pieces(s.size, Some(page));
            if self.piece >= pieces {
                (self.segment, self.piece) = (self.segment + 1, 0);
                continue;
            }
            let (addr, size) = (s.addr + self.piece * piece, piece.min(s.size));
            let e = if self.mapped {
                self.piece += 1;
                Event {
                    addr,
                    offset: Some(0),
                    ..Event::new(t, 0, dev, Api::CuMemMap, 0)
                }
            } else {
                Event::new(t, 0, dev, Api::CuMemCreate, 0)
            };
            self.mapped = !self.mapped;
            return Some(Event {
                size,
                handle: Some(addr),
                ..e
            });
        }
        let b = self.tensors.get(self.tensor)?;
        self.tensor += 1;
        Some(block_alloc(t, dev, b.addr, b.size, b.requested, b.stack))
    }
}

/// How `size` bytes are cut in pages of `page` bytes: where they are whole pages of it,
/// in those, else in one piece. The number of pieces, and the size of each.
fn pieces(size: u64, page: Option<u64>) -> (u64, u64) {
    let page = page
        .filter(|&p| p > 0 && size.is_multiple_of(p))
        .unwrap_or(size.max(1));
    (size.div_ceil(page), page)
}

/// `[addr, addr + size)` as [`pieces`] cuts it: (address, size) of each.
pub fn pages(addr: u64, size: u64, page: Option<u64>) -> impl Iterator<Item = (u64, u64)> {
    let (n, page) = pieces(size, page);
    (0..n).map(move |k| (addr + k * page, page.min(size)))
}

/// A tensor: the block's annotation, with the bytes asked for and the allocation's stack.
pub fn block_alloc(t: u64, dev: i32, addr: u64, size: u64, requested: u64, stack: u64) -> Event {
    let mut e = Event::new(t, 0, dev, Api::VramtraceBlockAlloc, 0);
    e.addr = addr;
    e.size = size;
    e.requested = Some(requested);
    e.stack = stack;
    e
}
