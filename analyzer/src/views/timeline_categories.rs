//! The allocated layer over time split by what its tensors were for, for `timeline` and
//! the plots' stacked areas; for a program without tensors that names its allocations'
//! categories with ranges, the reserved layer so split. A bucket keeps each category's
//! bytes at the moment the layer summed most in it (so the categories stacked reach the
//! layer's most, as its line does) and at its end.

use crate::model::{Category, Change, GroupBytes, GroupKey, Map, ProcessModel};

/// The layer names of the category series of tensors: `tensors:parameters`, ...
pub const LAYERS: [&str; 6] = [
    "tensors:parameters",
    "tensors:gradients",
    "tensors:optimizer_state",
    "tensors:activations",
    "tensors:other",
    "tensors:unknown",
];

/// The same of the reserved layer, for a program without tensors.
pub const RESERVED_LAYERS: [&str; 6] = [
    "reserved:parameters",
    "reserved:gradients",
    "reserved:optimizer_state",
    "reserved:activations",
    "reserved:other",
    "reserved:unknown",
];

/// The category index of a category series' layer name, of either layer.
pub fn index(layer: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|l| *l == layer)
        .or_else(|| RESERVED_LAYERS.iter().position(|l| *l == layer))
}

const N: usize = Category::ALL.len();

#[derive(Clone, Copy, Debug, Default)]
pub struct Bucket {
    /// The tensors' most in the bucket, and each category's bytes then.
    pub most: u64,
    pub at_most: [u64; N],
    pub end: [u64; N],
    pub touched: bool,
}

/// One process's device's tensors by category, bucketed.
#[derive(Clone, Debug, Default)]
pub struct CategorySeries {
    pub process: usize,
    pub device: i32,
    /// It splits the reserved layer (a program without tensors), not the tensors.
    pub reserved: bool,
    current: [u64; N],
    pub buckets: Vec<Bucket>,
}

fn total(bytes: &[u64; N]) -> u64 {
    bytes.iter().fold(0u64, |s, &b| s.saturating_add(b))
}

impl CategorySeries {
    /// A series from now on, of what `live` holds now (after the event of bucket `b`).
    pub fn new(
        process: usize,
        device: i32,
        reserved: bool,
        model: &ProcessModel,
        live: &Map<GroupKey, GroupBytes>,
        b: usize,
    ) -> Self {
        let mut s = CategorySeries {
            process,
            device,
            reserved,
            ..CategorySeries::default()
        };
        for (key, g) in live {
            let i = super::categories::category_of(model, key) as usize;
            s.current[i] = s.current[i].saturating_add(g.bytes);
        }
        s.record(b, s.current);
        s
    }

    /// The changes of one event on this device, in bucket `b`, by `category`.
    pub fn changed(
        &mut self,
        category: impl Fn(&GroupKey) -> Category,
        changes: &[Change],
        b: usize,
    ) {
        let before = self.current;
        for c in changes.iter().filter(|c| c.dev == self.device) {
            let i = category(&c.key) as usize;
            self.current[i] = if c.added {
                self.current[i].saturating_add(c.bytes)
            } else {
                self.current[i].saturating_sub(c.bytes)
            };
        }
        self.record(b, before);
    }

    /// The bytes now into bucket `b`; `before`: held before the event.
    fn record(&mut self, b: usize, before: [u64; N]) {
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, Bucket::default());
        }
        let bucket = &mut self.buckets[b];
        if !bucket.touched {
            // What was held when the bucket began counts toward its most.
            bucket.most = total(&before);
            bucket.at_most = before;
            bucket.touched = true;
        }
        let now = total(&self.current);
        if now > bucket.most {
            bucket.most = now;
            bucket.at_most = self.current;
        }
        bucket.end = self.current;
    }

    /// Ten buckets become one: the most of them, with its categories, and the last end.
    pub fn coarsen(&mut self) {
        let mut carry = [0u64; N];
        let mut merged = Vec::with_capacity(self.buckets.len() / 10 + 1);
        for chunk in self.buckets.chunks(10) {
            let mut out = Bucket::default();
            for b in chunk {
                if b.touched {
                    if !out.touched || b.most > out.most {
                        out.most = b.most;
                        out.at_most = b.at_most;
                    }
                    out.touched = true;
                    carry = b.end;
                } else if out.touched && total(&carry) > out.most {
                    out.most = total(&carry);
                    out.at_most = carry;
                }
            }
            out.end = carry;
            merged.push(out);
        }
        self.buckets = merged;
    }

    /// Category `c`'s (most, end) per bucket, `buckets` of them, carried past the last.
    pub fn points(&self, c: usize, buckets: usize) -> Vec<(u64, u64)> {
        let mut carry = 0;
        (0..buckets.max(self.buckets.len()))
            .map(|b| match self.buckets.get(b) {
                Some(x) if x.touched => {
                    carry = x.end[c];
                    (x.at_most[c], x.end[c])
                }
                _ => (carry, carry),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_keeps_the_categories_when_the_layer_summed_most() {
        let key = |c| GroupKey {
            api: vramtrace_schema::Api::VramtraceBlockAlloc,
            stack: 0,
            category: Some(c),
        };
        let change = |c, bytes, added| Change {
            dev: 0,
            key: key(c),
            bytes,
            added,
        };
        let mut s = CategorySeries::default();
        let of = |k: &GroupKey| k.category.unwrap();
        s.changed(of, &[change(Category::Parameters, 10, true)], 0);
        s.changed(of, &[change(Category::Activations, 5, true)], 0);
        s.changed(of, &[change(Category::Activations, 5, false)], 0);
        s.changed(of, &[change(Category::Gradients, 3, true)], 0);
        // Bucket 2 begins with what bucket 0 ended with; bucket 1 was not touched.
        s.changed(of, &[change(Category::Parameters, 10, false)], 2);
        let b = s.buckets[0];
        assert_eq!((b.most, b.at_most), (15, [10, 0, 0, 5, 0, 0]));
        assert_eq!(b.end, [10, 3, 0, 0, 0, 0]);
        assert_eq!(s.buckets[2].at_most, [10, 3, 0, 0, 0, 0]);
        assert_eq!(s.points(0, 3), vec![(10, 10), (10, 10), (10, 0)]);
        assert_eq!(s.points(1, 3), vec![(0, 3), (3, 3), (3, 3)]);
    }

    #[test]
    fn coarsening_keeps_the_categories_at_the_most() {
        let mut s = CategorySeries::default();
        let bucket = |most: u64, at_most: [u64; N], end: [u64; N]| Bucket {
            most,
            at_most,
            end,
            touched: true,
        };
        s.buckets = vec![
            bucket(5, [5, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0]),
            Bucket::default(),
            bucket(9, [5, 4, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]),
            bucket(3, [1, 1, 1, 0, 0, 0], [0, 0, 2, 0, 0, 0]),
        ];
        s.coarsen();
        assert_eq!(s.buckets.len(), 1);
        let b = s.buckets[0];
        assert_eq!(
            (b.most, b.at_most, b.end),
            (9, [5, 4, 0, 0, 0, 0], [0, 0, 2, 0, 0, 0])
        );
    }
}
