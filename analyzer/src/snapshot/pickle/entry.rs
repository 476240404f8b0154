//! History entries kept compact. A snapshot's history is nearly all of it: a million
//! dicts of six keys (`action`, `addr`, `size`, `stream`, `time_us`, `frames`), each key
//! and each frame list a memo reference into the file; PyTorch 2.6 and later add
//! `compile_context` and `user_metadata` to every entry, strings (mostly `"N/A"` and
//! `""`) that are memo references too. As a dict of values, one entry takes ~200 bytes;
//! as [`Entry`], a fixed record with the frame list and the strings by id, 56.
//!
//! A dict becomes an `Entry` when it has an `action` string and it is complete: filled
//! by one SETITEMS while empty (as protocols 1-5 write a small dict), or appended to a list
//! (as protocol 0, which sets one key at a time, leaves it); every key that is not one of the
//! known integer fields with an integer value stays in `rest`, a plain dict, so reading
//! an entry gives back exactly what the file said.

use super::{Object, Value};

/// The integer fields kept inline, in this order. An `oom` entry's `device_free` is not
/// one: a slot that nearly every entry leaves empty would make each 8 bytes larger.
pub const INT_KEYS: [&str; 4] = ["addr", "size", "stream", "time_us"];
/// All keys with a slot: the integer fields, then `action` and `frames`, then the two
/// strings of newer files.
pub const ACTION: usize = 4;
pub const FRAMES: usize = 5;
pub const COMPILE_CONTEXT: usize = 6;
pub const USER_METADATA: usize = 7;
pub const KEYS: usize = 8;

const NONE: u32 = u32::MAX;

/// A history entry decoded from a dict. Ids are indices into `Pickle::objects`.
#[derive(Debug, Clone)]
pub struct Entry {
    ints: [i64; 4],
    /// The `action` string.
    action: u32,
    /// The `frames` list or tuple (`NONE` when absent).
    frames: u32,
    /// `compile_context` and `user_metadata` where they are strings.
    strings: [u32; 2],
    /// The other keys, as a dict (`NONE` when there are none).
    rest: u32,
    /// Bit i: slot i is present; bit 15: `frames` is a tuple.
    present: u16,
}

const TUPLE: u16 = 1 << 15;

const _: () = assert!(std::mem::size_of::<Entry>() <= 56);

fn slot(key: &str) -> Option<usize> {
    match key {
        "action" => Some(ACTION),
        "frames" => Some(FRAMES),
        "compile_context" => Some(COMPILE_CONTEXT),
        "user_metadata" => Some(USER_METADATA),
        _ => INT_KEYS.iter().position(|k| *k == key),
    }
}

fn id(i: usize) -> Option<u32> {
    u32::try_from(i).ok().filter(|&i| i != NONE)
}

/// The slot of each of an entry's first 16 keys, in the file's order (`u8::MAX`: none).
pub type KeyOrder = [u8; 16];

/// The key objects seen for each slot: what an entry's keys read back as.
pub type KeyIds = [Option<usize>; KEYS];

/// `pairs` as an entry, or `None` when it is not one (no `action` string, a key twice,
/// an id too large). `rest` receives the pairs kept as a dict and returns its id.
/// `order` is the slot of each key of the entry before (`u8::MAX`: none), a guess that
/// is nearly always right: a pickler writes every entry's keys in the same order.
pub fn compact(
    objects: &[Object],
    keys: &mut KeyIds,
    order: &mut KeyOrder,
    pairs: impl IntoIterator<Item = (Value, Value)>,
    rest: &mut Vec<(Value, Value)>,
) -> Option<Entry> {
    let mut e = Entry::empty();
    rest.clear();
    // Slot names met, as values or in `rest`: one met twice leaves the dict a dict.
    let mut met = 0u8;
    for (j, (k, v)) in pairs.into_iter().enumerate() {
        let guess = order.get(j).map_or(usize::MAX, |&o| o as usize);
        let i = match k {
            Value::Str(kid) if keys.get(guess) == Some(&Some(kid)) => Some(guess),
            // The key objects are memo references to the first entry's, mostly: matched
            // by id before by text.
            Value::Str(kid) => keys
                .iter()
                .position(|&k| k == Some(kid))
                .or_else(|| match &objects[kid] {
                    Object::Str(name) => slot(name),
                    _ => None,
                }),
            _ => None,
        };
        if let Some(o) = order.get_mut(j) {
            *o = i.map_or(u8::MAX, |i| i as u8);
        }
        let (Some(i), Value::Str(kid)) = (i, k) else {
            rest.push((k, v));
            continue;
        };
        if met & (1 << i) != 0 {
            return None;
        }
        met |= 1 << i;
        if !e.set(i, v) {
            rest.push((k, v));
            continue;
        }
        keys[i].get_or_insert(kid);
    }
    e.complete().then_some(e)
}

impl Entry {
    pub fn empty() -> Entry {
        Entry {
            ints: [0; 4],
            action: NONE,
            frames: NONE,
            strings: [NONE; 2],
            rest: NONE,
            present: 0,
        }
    }

    /// Slot `i` set to `v`; false, with nothing set, where `v` is not of the slot's
    /// kind (or an id too large to keep), and the pair belongs in `rest`.
    #[inline]
    pub fn set(&mut self, i: usize, v: Value) -> bool {
        match (i, v) {
            (ACTION, Value::Str(s)) => match id(s) {
                Some(s) => self.action = s,
                None => return false,
            },
            (FRAMES, Value::List(l) | Value::Tuple(l)) => match id(l) {
                Some(l) => {
                    self.frames = l;
                    if matches!(v, Value::Tuple(_)) {
                        self.present |= TUPLE;
                    }
                }
                None => return false,
            },
            (COMPILE_CONTEXT | USER_METADATA, Value::Str(s)) => match id(s) {
                Some(s) => self.strings[i - COMPILE_CONTEXT] = s,
                None => return false,
            },
            (i, Value::Int(n)) if i < ACTION => self.ints[i] = n,
            _ => return false,
        }
        self.present |= 1 << i;
        true
    }

    /// Whether slot `i` is set.
    pub fn has(&self, i: usize) -> bool {
        self.present & (1 << i) != 0
    }

    /// Whether `compile_context` or `user_metadata` is kept in its slot.
    pub fn has_strings(&self) -> bool {
        self.has(COMPILE_CONTEXT) || self.has(USER_METADATA)
    }

    /// Whether this is an entry: it has an `action` string.
    pub fn complete(&self) -> bool {
        self.has(ACTION)
    }

    pub fn set_rest(&mut self, rest: usize) -> Option<()> {
        self.rest = id(rest)?;
        Some(())
    }

    pub fn rest(&self) -> Option<usize> {
        (self.rest != NONE).then_some(self.rest as usize)
    }

    /// The value of slot `i`, if present.
    pub fn slot(&self, i: usize) -> Option<Value> {
        if !self.has(i) {
            return None;
        }
        Some(match i {
            ACTION => Value::Str(self.action as usize),
            FRAMES if self.present & TUPLE != 0 => Value::Tuple(self.frames as usize),
            FRAMES => Value::List(self.frames as usize),
            COMPILE_CONTEXT | USER_METADATA => {
                Value::Str(self.strings[i - COMPILE_CONTEXT] as usize)
            }
            i => Value::Int(self.ints[i]),
        })
    }

    /// Integer field `i` (an index into [`INT_KEYS`]) when the dict had it as an integer;
    /// `None` when it had it otherwise or not at all (then see `rest`).
    pub fn int(&self, i: usize) -> Option<i64> {
        self.has(i).then_some(self.ints[i])
    }

    /// `entry[key]` as the dict had it.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.slot(slot(key)?)
    }

    /// The dict again: slots (with the key objects first seen for them), then the rest.
    pub fn pairs(&self, keys: &KeyIds, rest: &[(Value, Value)]) -> Vec<(Value, Value)> {
        let mut out: Vec<(Value, Value)> = (0..KEYS)
            .filter_map(|i| Some((Value::Str(keys[i]?), self.slot(i)?)))
            .collect();
        out.extend_from_slice(rest);
        out
    }
}
