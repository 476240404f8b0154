//! The pickle's memo, four bytes a slot. A pickler puts every container and string it
//! writes in the memo, so a snapshot's memo has a slot per history entry: as 16-byte
//! [`Value`]s that was a sixth of the decoded snapshot, and the memory it takes is most
//! of what decoding costs (each page is faulted in once).
//!
//! A slot is the object id with its kind (what the pickler puts); anything else (numbers,
//! `None`, ids past 2^28) goes to a side table. Indices come in order from a pickler and
//! live in the dense slots; a file may name any index, though, and a few bytes naming ever
//! larger ones must not allocate for every index in between: those go to `sparse`.

use super::Value;
use crate::model::Map;

/// Bit 31 of a slot: the rest is an index into `side`.
const SIDE: u32 = 1 << 31;
/// Otherwise bits 28-30 are the kind, the rest the object id.
const KIND_SHIFT: u32 = 28;
const ID_MASK: u32 = (1 << KIND_SHIFT) - 1;
/// The kinds: each `Value` that names an object.
const STR: u32 = 0;
const BYTES: u32 = 1;
const LIST: u32 = 2;
const TUPLE: u32 = 3;
const DICT: u32 = 4;
const SET: u32 = 5;
const BIG_INT: u32 = 6;

#[derive(Default)]
pub struct Memo {
    dense: Vec<u32>,
    side: Vec<Value>,
    sparse: Map<usize, Value>,
    /// Distinct indices written (Python's `len(memo)`, which MEMOIZE uses).
    len: usize,
}

impl Memo {
    /// Distinct indices written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes the memo holds (a map entry counted as its key, value and control byte).
    pub fn bytes(&self) -> usize {
        self.dense.capacity() * std::mem::size_of::<u32>()
            + self.side.capacity() * std::mem::size_of::<Value>()
            + self.sparse.capacity() * (std::mem::size_of::<(usize, Value)>() + 1)
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<Value> {
        match self.dense.get(i) {
            Some(&slot) => Some(self.value(slot)),
            None => self.sparse.get(&i).copied(),
        }
    }

    /// The string object at index `i`, if that is what it holds: a history entry's keys
    /// are looked up by the million, and the kind is checked without building a value.
    #[inline]
    pub fn str(&self, i: usize) -> Option<usize> {
        match self.dense.get(i) {
            Some(&slot) if slot >> KIND_SHIFT == STR => Some((slot & ID_MASK) as usize),
            _ => match self.get(i) {
                Some(Value::Str(id)) => Some(id),
                _ => None,
            },
        }
    }

    /// Sets index `i` to `v`; false, with nothing set, when the side table is full (2^31
    /// values that are no objects: more than a 2 GB file holds).
    pub fn set(&mut self, i: usize, v: Value) -> bool {
        if i > self.dense.len() {
            self.len += self.sparse.insert(i, v).is_none() as usize;
            return true;
        }
        // A side entry put over by another number or `None` (`N` then `q\x00`, a million
        // times) is reused: a new one each time would grow with the file, where Python's
        // memo does not.
        if let Some(&old) = self.dense.get(i) {
            if old & SIDE != 0 && self.inline(v).is_none() {
                self.side[(old & !SIDE) as usize] = v;
                return true;
            }
        }
        let Some(slot) = self.slot(v) else {
            return false;
        };
        if i < self.dense.len() {
            self.dense[i] = slot;
        } else {
            // Nearly always empty: a look-up per memo entry is worth sparing.
            let was_sparse = !self.sparse.is_empty() && self.sparse.remove(&i).is_some();
            self.len += !was_sparse as usize;
            self.dense.push(slot);
        }
        true
    }

    fn slot(&mut self, v: Value) -> Option<u32> {
        if let Some(slot) = self.inline(v) {
            return Some(slot);
        }
        let at = u32::try_from(self.side.len())
            .ok()
            .filter(|&at| at < SIDE)?;
        self.side.push(v);
        Some(SIDE | at)
    }

    /// `v` as a slot of its own: an object id of at most 28 bits, with its kind.
    fn inline(&self, v: Value) -> Option<u32> {
        let (kind, id) = match v {
            Value::Str(id) => (STR, id),
            Value::Bytes(id) => (BYTES, id),
            Value::List(id) => (LIST, id),
            Value::Tuple(id) => (TUPLE, id),
            Value::Dict(id) => (DICT, id),
            Value::Set(id) => (SET, id),
            Value::BigInt(id) => (BIG_INT, id),
            Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) => return None,
        };
        let id = u32::try_from(id).ok().filter(|&id| id <= ID_MASK)?;
        Some(kind << KIND_SHIFT | id)
    }

    #[inline]
    fn value(&self, slot: u32) -> Value {
        if slot & SIDE != 0 {
            return self.side[(slot & !SIDE) as usize];
        }
        let id = (slot & ID_MASK) as usize;
        match slot >> KIND_SHIFT {
            STR => Value::Str(id),
            BYTES => Value::Bytes(id),
            LIST => Value::List(id),
            TUPLE => Value::Tuple(id),
            DICT => Value::Dict(id),
            SET => Value::Set(id),
            // BIG_INT: `inline` writes no other kind.
            _ => Value::BigInt(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_comes_back_as_it_was_put() {
        let values = [
            Value::None,
            Value::Bool(true),
            Value::Int(-7),
            Value::Int(i64::MIN),
            Value::Float(0.5),
            Value::Str(3),
            Value::Bytes(ID_MASK as usize),
            Value::List(ID_MASK as usize + 1),
            Value::Tuple(0),
            Value::Dict(usize::MAX),
            Value::Set(12),
            Value::BigInt(1 << 40),
        ];
        let mut memo = Memo::default();
        for (i, &v) in values.iter().enumerate() {
            assert!(memo.set(i, v));
        }
        // Sparse, then overwritten in place.
        assert!(memo.set(1000, Value::Int(1)));
        assert!(memo.set(2, Value::Str(9)));
        for (i, &v) in values.iter().enumerate() {
            let want = if i == 2 { Value::Str(9) } else { v };
            assert_eq!(memo.get(i), Some(want), "index {i}");
        }
        assert_eq!(memo.get(1000), Some(Value::Int(1)));
        assert_eq!(memo.get(values.len()), None);
        assert_eq!(memo.len(), values.len() + 1);
    }

    #[test]
    fn an_index_put_over_and_over_takes_one_side_entry() {
        let mut memo = Memo::default();
        for n in 0..1000 {
            assert!(memo.set(0, Value::Int(n)));
        }
        assert_eq!(memo.get(0), Some(Value::Int(999)));
        assert_eq!(memo.side.len(), 1);
        // And back to an object, then a number again.
        assert!(memo.set(0, Value::Str(4)));
        assert_eq!(memo.get(0), Some(Value::Str(4)));
        assert!(memo.set(0, Value::None));
        assert_eq!(memo.get(0), Some(Value::None));
        assert_eq!(memo.len(), 1);
    }
}
