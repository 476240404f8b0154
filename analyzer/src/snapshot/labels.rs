//! What labels a snapshot's tensor ([`crate::model::Label`]): the `user_metadata` of its
//! `alloc` entry, and the private pool of the segment that held it.
//!
//! A snapshot names pools only on its final segments (`segment_pool_id`), so a tensor's
//! pool is known where its segment lasted to the end: a tensor allocated inside the range
//! of such a segment after that segment's last `segment_alloc` (or at any time, where the
//! history never allocates it: it was there before) was in it. A tensor of a segment freed
//! before the snapshot has no pool named.
//!
//! An `annotate` entry (`torch.cuda.memory._annotate_tensor`, 2.14+) says something of the
//! live tensor at its address after the fact, in its `user_metadata`; the annotations
//! belong to the tensor's allocation, as PyTorch's own viewer shows them.

use super::model::{Action, DeviceSnapshot};
use super::pickle::{Pickle, Value};
use crate::model::{Label, Map, Metadata};
use crate::whatif::input::PrivateSegment;

/// Bytes of the longest `user_metadata` read: a longer one is left out whole, not cut (two
/// values cut alike would be one label).
const METADATA_BYTES: usize = 4096;
/// The action of an annotation after the fact.
pub const ANNOTATE: &str = "annotate";
/// Annotations kept per tensor at most.
const MOST_ANNOTATIONS: usize = 16;

/// Pairs of a dict `user_metadata` read at most (more would be longer than that anyway).
const MOST_PAIRS: usize = 256;

/// A final segment of a private pool, and the history entry that allocated it (`None`: it
/// was there before the history).
#[derive(Debug, Clone, Copy)]
struct Born {
    segment: PrivateSegment,
    entry: Option<usize>,
}

/// One device's private-pool segments, and what its labels could not say.
#[derive(Debug, Default)]
pub struct Labels {
    /// By address.
    private: Vec<Born>,
    /// `user_metadata` values left out (of `alloc` and `annotate` entries): neither a
    /// string nor a dict of them, or too long.
    pub unread_metadata: u64,
    /// Annotations of tensors by the entry that allocated them, and of tensors from
    /// before the history by address.
    annotated: Map<usize, Vec<Metadata>>,
    annotated_before: Map<u64, Vec<Metadata>>,
    /// Annotations left out: of no live tensor, or past [`MOST_ANNOTATIONS`] on one.
    pub annotations_left_out: u64,
}

impl Labels {
    /// The private pools of `d`'s final segments, each born at the last `segment_alloc`
    /// of its address in `trace`, and where the history `annotates`, each tensor's
    /// annotations: one reading of the history, and none where neither is wanted.
    pub fn of_device(p: &Pickle, d: &DeviceSnapshot, trace: &[Value], annotates: bool) -> Labels {
        let private = super::allocator_input::private_segments(d)
            .into_iter()
            .map(|segment| Born {
                segment,
                entry: None,
            })
            .collect();
        let mut labels = Labels {
            private,
            ..Labels::default()
        };
        if annotates || !labels.private.is_empty() {
            labels.walk(p, trace, annotates);
        }
        labels
    }

    /// Reads `trace` once: each private segment's last `segment_alloc`, and (`annotates`)
    /// each `annotate` entry given to the tensor live at its address then.
    fn walk(&mut self, p: &Pickle, trace: &[Value], annotates: bool) {
        let mut live: Map<u64, usize> = Map::default();
        let mut allocated: std::collections::HashSet<u64, rustc_hash::FxBuildHasher> =
            Default::default();
        for (i, &v) in trace.iter().enumerate() {
            let Ok(e) = super::history::entry(p, v) else {
                continue;
            };
            match &e.action {
                Action::SegmentAlloc => {
                    let at = self
                        .private
                        .binary_search_by_key(&e.addr, |s| s.segment.addr);
                    if let Ok(k) = at {
                        self.private[k].entry = Some(i);
                    }
                }
                Action::Alloc if annotates => {
                    live.insert(e.addr, i);
                    allocated.insert(e.addr);
                }
                Action::FreeCompleted if annotates => {
                    // A tensor from before the history freed: later annotations there
                    // are of no tensor from before.
                    live.remove(&e.addr);
                    allocated.insert(e.addr);
                }
                Action::Other(a) if annotates && a == ANNOTATE => {
                    let text = e.user_metadata.and_then(|m| self.metadata(p, m));
                    let list = match live.get(&e.addr) {
                        Some(&at) => Some(self.annotated.entry(at).or_default()),
                        None if !allocated.contains(&e.addr) => {
                            Some(self.annotated_before.entry(e.addr).or_default())
                        }
                        None => None,
                    };
                    match (list, text) {
                        (Some(list), Some(text)) if list.len() < MOST_ANNOTATIONS => {
                            list.push(text)
                        }
                        (_, None) => {}
                        _ => self.annotations_left_out += 1,
                    }
                }
                _ => {}
            }
        }
    }

    /// The private pool of a tensor at `addr`, allocated by entry `entry` (`None`: before
    /// the history).
    fn pool_at(&self, addr: u64, entry: Option<usize>) -> Option<(i64, i64)> {
        let k = self
            .private
            .partition_point(|s| s.segment.addr <= addr)
            .checked_sub(1)?;
        let Born {
            segment: s,
            entry: born,
        } = self.private[k];
        let inside = addr - s.addr < s.size;
        let after = match (born, entry) {
            (None, _) => true,
            (Some(born), Some(i)) => i > born,
            (Some(_), None) => false,
        };
        (inside && after).then_some(s.pool)
    }

    /// The label of a tensor at `addr` allocated by entry `entry` (`None`: before the
    /// history) with `user_metadata` `metadata`.
    pub fn label(
        &mut self,
        p: &Pickle,
        addr: u64,
        entry: Option<usize>,
        metadata: Option<Value>,
    ) -> Label {
        let annotations = match entry {
            Some(i) => self.annotated.get(&i),
            None => self.annotated_before.get(&addr),
        };
        let annotations = annotations.cloned().unwrap_or_default();
        Label {
            user_metadata: metadata.and_then(|v| self.metadata(p, v)),
            pool: self.pool_at(addr, entry),
            annotations,
        }
    }

    /// `user_metadata` as read: `None` where it says nothing (`""`, `"N/A"`, an empty
    /// dict) or cannot be read (counted). The size is checked before anything is copied:
    /// one long string shared by every entry through the pickle's memo costs nothing.
    fn metadata(&mut self, p: &Pickle, v: Value) -> Option<Metadata> {
        if matches!(v, Value::None) {
            return None;
        }
        let read = match p.str(v) {
            Some(t) if t.len() > METADATA_BYTES => None,
            Some(t) => Some(Metadata::Text(t.to_string())),
            None => pairs(p, v).map(Metadata::Pairs),
        };
        match read {
            Some(Metadata::Text(t)) if t.is_empty() || t == "N/A" => None,
            Some(Metadata::Pairs(pairs)) if pairs.is_empty() => None,
            Some(m) => Some(m),
            None => {
                self.unread_metadata += 1;
                None
            }
        }
    }
}

/// A dict of strings, integers and booleans (Python's `str` of each), sorted by key, of at
/// most [`METADATA_BYTES`] in all; `None` for anything else.
fn pairs(p: &Pickle, v: Value) -> Option<Vec<(String, String)>> {
    let dict = p.dict(v)?;
    if dict.len() > MOST_PAIRS {
        return None;
    }
    let mut bytes = 0usize;
    let mut out = Vec::with_capacity(dict.len());
    for &(k, v) in dict.iter() {
        let key = p.str(k)?;
        let value = match v {
            Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
            Value::Str(_) => {
                let t = p.str(v)?;
                if t.len() > METADATA_BYTES {
                    return None;
                }
                t.to_string()
            }
            _ => p.int(v)?.to_string(),
        };
        bytes = bytes.saturating_add(key.len() + value.len());
        if bytes > METADATA_BYTES {
            return None;
        }
        out.push((key.to_string(), value));
    }
    out.sort();
    // A key the file wrote twice: Python keeps the last.
    out.dedup_by(|later, earlier| later.0 == earlier.0);
    Some(out)
}
