//! What labels a snapshot's tensor ([`crate::model::Label`]): the `user_metadata` of its
//! `alloc` entry, and the private pool of the segment that held it.
//!
//! A snapshot names pools only on its final segments (`segment_pool_id`), so a tensor's
//! pool is known where its segment lasted to the end: a tensor allocated inside the range
//! of such a segment after that segment's last `segment_alloc` (or at any time, where the
//! history never allocates it: it was there before) was in it. A tensor of a segment freed
//! before the snapshot has no pool named.

use super::model::{Action, DeviceSnapshot};
use super::pickle::{Pickle, Value};
use crate::model::Label;
use crate::whatif::input::PrivateSegment;

/// Bytes of the longest `user_metadata` read: a longer one is left out whole, not cut (two
/// values cut alike would be one label).
const METADATA_BYTES: usize = 4096;
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
    /// `user_metadata` values left out: neither a string nor a dict of them, or too long.
    pub unread_metadata: u64,
}

impl Labels {
    /// The private pools of `d`'s final segments, each born at the last `segment_alloc`
    /// of its address in `trace` (read only where a private pool exists).
    pub fn of_device(p: &Pickle, d: &DeviceSnapshot, trace: &[Value]) -> Labels {
        let mut private: Vec<Born> = super::allocator_input::private_segments(d)
            .into_iter()
            .map(|segment| Born {
                segment,
                entry: None,
            })
            .collect();
        if !private.is_empty() {
            for (i, &v) in trace.iter().enumerate() {
                let Ok(e) = super::history::entry(p, v) else {
                    continue;
                };
                if e.action != Action::SegmentAlloc {
                    continue;
                }
                if let Ok(k) = private.binary_search_by_key(&e.addr, |s| s.segment.addr) {
                    private[k].entry = Some(i);
                }
            }
        }
        Labels {
            private,
            unread_metadata: 0,
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
        Label {
            user_metadata: metadata.and_then(|v| self.metadata(p, v)),
            pool: self.pool_at(addr, entry),
        }
    }

    /// `user_metadata` as text: `None` where it says nothing (`""`, `"N/A"`, an empty
    /// dict) or cannot be read (counted).
    fn metadata(&mut self, p: &Pickle, v: Value) -> Option<String> {
        let text = match (p.str(v), p.dict(v)) {
            (Some(s), _) => Some(s.to_string()),
            (None, Some(pairs)) if pairs.len() > MOST_PAIRS => None,
            (None, Some(pairs)) => pairs
                .iter()
                .map(|&(k, v)| {
                    let value = p
                        .str(v)
                        .map(str::to_string)
                        .or_else(|| p.int(v).map(|i| i.to_string()))?;
                    Some(format!("{}={value}", p.str(k)?))
                })
                .collect::<Option<Vec<_>>>()
                .map(|pairs| pairs.join(", ")),
            (None, None) if matches!(v, Value::None) => return None,
            (None, None) => None,
        };
        match text {
            Some(t) if t.len() > METADATA_BYTES => {
                self.unread_metadata += 1;
                None
            }
            Some(t) if t.is_empty() || t == "N/A" => None,
            Some(t) => Some(t),
            None => {
                self.unread_metadata += 1;
                None
            }
        }
    }
}
