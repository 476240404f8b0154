//! The merge of the run's sources by time: a heap, with the greatest item (the next to
//! go) kept beside it when it is pushed. One source at a time is the common case (one
//! snapshot, one trace, or one process far ahead of the others), and its next event then
//! goes straight back out, without a heap push and pop per event.

use std::collections::BinaryHeap;

pub struct Queue<T: Ord> {
    heap: BinaryHeap<T>,
    /// Where set, at least every item in `heap`.
    front: Option<T>,
}

impl<T: Ord> Queue<T> {
    pub fn new() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            front: None,
        }
    }

    pub fn push(&mut self, item: T) {
        let item = match self.front.take() {
            Some(front) if item < front => {
                self.front = Some(front);
                item
            }
            Some(front) => {
                self.front = Some(item);
                front
            }
            None if self.heap.peek().is_none_or(|top| item >= *top) => {
                self.front = Some(item);
                return;
            }
            None => item,
        };
        self.heap.push(item);
    }

    /// The greatest item, as `BinaryHeap::pop`.
    pub fn pop(&mut self) -> Option<T> {
        self.front.take().or_else(|| self.heap.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_as_from_a_heap() {
        let mut draws = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: u64| draws.u64(..n);
        for _ in 0..2000 {
            let (mut queue, mut heap) = (Queue::new(), BinaryHeap::new());
            for _ in 0..next(60) {
                if next(3) == 0 {
                    assert_eq!(queue.pop(), heap.pop());
                } else {
                    let item = (next(20), next(3));
                    queue.push(item);
                    heap.push(item);
                }
            }
            while let Some(item) = heap.pop() {
                assert_eq!(queue.pop(), Some(item));
            }
            assert_eq!(queue.pop(), None);
        }
    }
}
