//! Events read ahead of the one handed out, to restore time order within the reorder
//! window: the earliest first, and for equal times the one read first.
//!
//! Nearly every event comes in order: those go to the back of a queue, at no cost. The
//! few late ones (a thread preempted between its timestamp and its push) wait in a heap.
//! A sorted list that late events slide into costs a move of half the window per event
//! when every event is late by half of it (75 s of CPU for a 26-MB trace); a heap alone
//! costs a logarithm on every event, a quarter of the replay's time on an ordinary trace.

use crate::event::Event;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

#[derive(Default)]
pub struct Ahead {
    /// Sorted by (time, read order): each was no earlier than the one before it.
    in_order: VecDeque<Entry>,
    late: BinaryHeap<Reverse<Entry>>,
    /// Events read so far: the order of equal times.
    read: u64,
}

struct Entry {
    t: u64,
    seq: u64,
    event: Event,
}

impl Ahead {
    pub fn len(&self) -> usize {
        self.in_order.len() + self.late.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn push(&mut self, event: Event) {
        self.read += 1;
        let entry = Entry {
            t: event.t,
            seq: self.read,
            event,
        };
        if self.in_order.back().is_none_or(|last| last.t <= entry.t) {
            self.in_order.push_back(entry);
        } else {
            self.late.push(Reverse(entry));
        }
    }

    /// The earliest event held, the first read among equal times.
    pub fn pop(&mut self) -> Option<Event> {
        let late_first = match (self.in_order.front(), self.late.peek()) {
            (Some(a), Some(Reverse(b))) => b < a,
            (None, Some(_)) => true,
            _ => false,
        };
        let entry = if late_first {
            self.late.pop().map(|Reverse(e)| e)
        } else {
            self.in_order.pop_front()
        };
        entry.map(|e| e.event)
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.t, self.seq) == (other.t, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.t, self.seq).cmp(&(other.t, other.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;

    /// Against a stable sort of the same times: in order, late, and equal times mixed.
    #[test]
    fn hands_out_a_stable_sort() {
        let times = [5u64, 7, 7, 3, 9, 7, 1, 9, 10, 2, 7, 11, 11, 0];
        let mut ahead = Ahead::default();
        for (i, &t) in times.iter().enumerate() {
            ahead.push(Event::new(t, i as u32, 0, Api::CudaMalloc, 0));
        }
        let mut want: Vec<(u64, u32)> = times
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, i as u32))
            .collect();
        want.sort_by_key(|w| w.0);
        let got: Vec<(u64, u32)> = std::iter::from_fn(|| ahead.pop())
            .map(|e| (e.t, e.tid))
            .collect();
        assert_eq!(got, want);
    }
}
