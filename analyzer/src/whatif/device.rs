//! The drivers a replay runs the allocator on: a recording answers as the recorded run's
//! driver did; a card of a given capacity answers by its free memory and picks addresses
//! of its own.

use super::input::{Event, Span};
use super::replay::{describe, Drift};
use crate::allocator::sizes::ROUND_LARGE;
use crate::allocator::Device;
use std::collections::{BTreeMap, VecDeque};

/// Addresses for reservations the recording does not show (the replay then drifts): far
/// above any a driver hands out.
const UNRECORDED: u64 = 0xf000_0000_0000_0000;

/// The recorded run's driver: `cudaMalloc` succeeds where the recording shows the next
/// segment event of this request to be a `segment_alloc`, at the recorded address, and
/// fails otherwise (the recording then shows cached segments released, or an `oom`).
/// Every call is checked against the recorded events; the first difference is kept.
#[derive(Debug, Default)]
pub struct Recorded {
    /// The recorded segment events of the request being replayed (with their entry
    /// indices), not yet matched.
    pub expected: VecDeque<(usize, Event)>,
    pub drift: Option<Drift>,
    /// The source entry of the request being replayed.
    pub current: usize,
    unrecorded: u64,
}

impl Recorded {
    fn differs(&mut self, did: String) {
        if self.drift.is_some() {
            return;
        }
        let (entry, message) = match self.expected.front() {
            Some((at, e)) => (
                *at,
                format!(
                    "the replay did {did} where the recording has {}",
                    describe(e)
                ),
            ),
            None => (
                self.current,
                format!("the replay did {did}, which the recording did not"),
            ),
        };
        self.drift = Some(Drift { entry, message });
    }
}

impl Device for Recorded {
    fn malloc(&mut self, size: u64, _reserved: u64) -> Option<u64> {
        match self.expected.front() {
            Some(&(_, Event::SegmentAlloc(Span { addr, size: s, .. }))) => {
                if s != size {
                    self.differs(format!("segment_alloc of {size} bytes"));
                }
                self.expected.pop_front();
                Some(addr)
            }
            _ => None,
        }
    }

    fn free(&mut self, addr: u64, size: u64) {
        match self.expected.front() {
            Some(&(_, Event::SegmentFree(s))) if s.addr == addr && s.size == size => {
                self.expected.pop_front();
            }
            _ => self.differs(format!("segment_free {addr:#x} of {size} bytes")),
        }
    }

    /// The address of the request's first recorded `segment_map`: a new expandable
    /// segment's first pages are mapped at its start. A reservation made on the way to an
    /// out-of-memory path (its mapping failed; cached pages are unmapped first) is mapped
    /// after the `segment_unmap`s.
    fn reserve(&mut self, size: u64) -> u64 {
        let map = self.expected.iter().find_map(|(_, e)| match e {
            Event::SegmentMap(s) => Some(s.addr),
            _ => None,
        });
        match map {
            Some(addr) => addr,
            None => {
                self.unrecorded = self.unrecorded.max(UNRECORDED);
                let at = self.unrecorded;
                self.unrecorded = self.unrecorded.saturating_add(size);
                at
            }
        }
    }

    fn map(&mut self, addr: u64, size: u64, _reserved: u64) -> bool {
        match self.expected.front() {
            Some(&(_, Event::SegmentMap(s))) => {
                if s.addr != addr || s.size != size {
                    self.differs(format!("segment_map {addr:#x} of {size} bytes"));
                }
                self.expected.pop_front();
                true
            }
            _ => false,
        }
    }

    fn unmap(&mut self, addr: u64, size: u64) {
        match self.expected.front() {
            Some(&(_, Event::SegmentUnmap(s))) if s.addr == addr && s.size == size => {
                self.expected.pop_front();
            }
            _ => self.differs(format!("segment_unmap {addr:#x} of {size} bytes")),
        }
    }

    fn release(&mut self, _addr: u64) {}
}

/// A card on which the allocator may reserve `capacity` bytes (`None`: without limit).
/// Addresses: the lowest free range above `base` that fits, 2 MiB aligned, as a driver's
/// virtual address allocator would; no recorded address is reused unless freed.
#[derive(Debug)]
pub struct Card {
    pub capacity: Option<u64>,
    /// Address ranges handed out, by start.
    used: BTreeMap<u64, u64>,
    base: u64,
}

impl Card {
    pub fn new(
        capacity: Option<u64>,
        base: u64,
        initial: impl IntoIterator<Item = (u64, u64)>,
    ) -> Card {
        Card {
            capacity,
            used: initial.into_iter().collect(),
            base: base.div_ceil(ROUND_LARGE) * ROUND_LARGE,
        }
    }
}

impl Card {
    fn fits(&self, size: u64, reserved: u64) -> bool {
        self.capacity
            .is_none_or(|cap| reserved.saturating_add(size) <= cap)
    }

    /// The lowest free address range of `size` bytes above the base, 2 MiB aligned.
    fn place(&mut self, size: u64) -> u64 {
        let mut at = self.base;
        for (&start, &len) in self.used.range(self.base..) {
            if start >= at.saturating_add(size) {
                break;
            }
            at = at.max((start + len).div_ceil(ROUND_LARGE) * ROUND_LARGE);
        }
        self.used.insert(at, size);
        at
    }
}

impl Device for Card {
    fn malloc(&mut self, size: u64, reserved: u64) -> Option<u64> {
        self.fits(size, reserved).then(|| self.place(size))
    }

    fn free(&mut self, addr: u64, _size: u64) {
        self.used.remove(&addr);
    }

    fn reserve(&mut self, size: u64) -> u64 {
        self.place(size)
    }

    fn map(&mut self, _addr: u64, size: u64, reserved: u64) -> bool {
        self.fits(size, reserved)
    }

    fn unmap(&mut self, _addr: u64, _size: u64) {}

    fn release(&mut self, addr: u64) {
        self.used.remove(&addr);
    }

    fn free_memory(&self, reserved: u64) -> Option<u64> {
        self.capacity.map(|cap| cap.saturating_sub(reserved))
    }
}
