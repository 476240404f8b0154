//! The history entry as protocols 2-5 write it, read in one step: `EMPTY_DICT`, a memo
//! put, `MARK`, keys that are memo references to the key strings, each followed by a
//! memo reference or a small integer, and `SETITEMS`. A snapshot is millions of these,
//! and reading one through the stack machine costs 16 opcodes' worth of pushes, pops, a
//! MARK search and a key search per key.
//!
//! In two steps, so that the first can run ahead on a thread of its own (`ahead.rs`):
//! [`scan`] reads the bytes into a [`Raw`] entry (memo references as indices), knowing
//! nothing of the memo; [`resolve`] looks the references up when the machine reaches
//! that `EMPTY_DICT`. Either gives up (`None`) on anything else (a new frame list, a key
//! in another order than the entry before, a value of another kind, a second literal
//! string), and the machine then runs the same bytes opcode by opcode. One short ASCII
//! string written out as a value is read here too: PyTorch 2.6 and later write each
//! entry's `compile_context` (`"N/A"`) as a string of its own, never a memo reference.
//! What they give is what the machine would have made of those bytes, so both paths
//! decode a file to the same objects.

use super::entry::{Entry, KeyIds, KeyOrder};
use super::memo::Memo;
use super::Value;

/// The most bytes after `EMPTY_DICT` one entry read here takes: 8 keys and values of at
/// most 10 bytes each, the put, MARK and SETITEMS.
pub const MAX_BYTES: usize = 200;
/// The most keys of an entry read here (PyTorch writes 6 to 8).
const MAX_KEYS: usize = 8;
/// The longest literal string value read here.
const MAX_LITERAL: usize = 8;

/// Where the dict is put in the memo (`put_at` holds the index of `At`).
#[derive(Clone, Copy, Debug)]
enum Put {
    None,
    /// `MEMOIZE`: at the memo's length.
    Next,
    /// `BINPUT`, `LONG_BINPUT`: at `put_at`.
    At,
}

/// An entry's bytes read, its memo references not yet looked up. Millions are written on
/// one thread and read on another: kept to two cache lines.
#[derive(Clone, Debug)]
pub struct Raw {
    /// Offset in the stream of its `EMPTY_DICT`.
    pub at: usize,
    /// Values: a memo index where bit i of `memo` is set, an integer otherwise.
    values: [i64; MAX_KEYS],
    /// Keys: memo indices.
    keys: [u32; MAX_KEYS],
    put_at: u32,
    put: Put,
    len: u8,
    memo: u8,
    /// Keys and values.
    pairs: u8,
    /// The pair whose value is a literal string (its bytes in `values`), and the string's
    /// length and memo put; `NO_LITERAL` when there is none.
    literal: u8,
    literal_len: u8,
    literal_put: Put,
    literal_put_at: u32,
}

const NO_LITERAL: u8 = u8::MAX;

/// What [`resolve`] makes of an entry: the memo index the dict is put at, the entry, and
/// its literal string (its text and memo index), made after the dict as the machine makes
/// it.
pub struct Resolved {
    pub put: Option<usize>,
    pub entry: Entry,
    pub literal: Option<(String, Option<usize>)>,
}

const _: () = assert!(std::mem::size_of::<Raw>() <= 128);

impl Raw {
    /// Bytes after the `EMPTY_DICT`, up to and including `SETITEMS`.
    pub fn len(&self) -> usize {
        self.len as usize
    }
}

/// Reads the bytes after an `EMPTY_DICT` at stream offset `at` (`b`, which holds at
/// least [`MAX_BYTES`] of them where the stream has as many) as an entry's; `None` when
/// they are not one.
pub fn scan(b: &[u8], at: usize) -> Option<Raw> {
    let (mut i, put, put_at) = match *b.first()? {
        0x94 => (1, Put::Next, 0),
        b'q' => (2, Put::At, *b.get(1)? as u32),
        b'r' => (5, Put::At, u32_at(b, 1)?),
        _ => (0, Put::None, 0),
    };
    if *b.get(i)? != b'(' {
        return None;
    }
    i += 1;
    let mut raw = Raw {
        at,
        values: [0; MAX_KEYS],
        keys: [0; MAX_KEYS],
        put_at,
        put,
        len: 0,
        memo: 0,
        pairs: 0,
        literal: NO_LITERAL,
        literal_len: 0,
        literal_put: Put::None,
        literal_put_at: 0,
    };
    for n in 0..=2 * MAX_KEYS {
        let op = *b.get(i)?;
        i += 1;
        let (item, memo) = match op {
            // SETITEMS after a value.
            b'u' if n % 2 == 0 => {
                raw.len = u8::try_from(i).ok()?;
                raw.pairs = (n / 2) as u8;
                return Some(raw);
            }
            b'h' => {
                i += 1;
                (*b.get(i - 1)? as i64, true)
            }
            b'j' => {
                i += 4;
                (u32_at(b, i - 4)? as i64, true)
            }
            // Values only: keys are memo references.
            _ if n % 2 == 0 => return None,
            b'K' => {
                i += 1;
                (*b.get(i - 1)? as i64, false)
            }
            b'M' => {
                i += 2;
                (
                    u16::from_le_bytes(b.get(i - 2..i)?.try_into().ok()?) as i64,
                    false,
                )
            }
            b'J' => {
                i += 4;
                (u32_at(b, i - 4)? as i32 as i64, false)
            }
            0x8a => {
                let len = *b.get(i)? as usize;
                if len > 8 {
                    return None;
                }
                let bytes = b.get(i + 1..i + 1 + len)?;
                i += 1 + len;
                (signed(bytes), false)
            }
            // SHORT_BINUNICODE, ASCII (the text is the bytes), then its put if any.
            0x8c if raw.literal == NO_LITERAL => {
                let len = *b.get(i)? as usize;
                let bytes = b.get(i + 1..i + 1 + len)?;
                if len > MAX_LITERAL || !bytes.is_ascii() {
                    return None;
                }
                i += 1 + len;
                let mut text = [0u8; 8];
                text[..len].copy_from_slice(bytes);
                (raw.literal_put, raw.literal_put_at, i) = match *b.get(i)? {
                    0x94 => (Put::Next, 0, i + 1),
                    b'q' => (Put::At, *b.get(i + 1)? as u32, i + 2),
                    b'r' => (Put::At, u32_at(b, i + 1)?, i + 5),
                    _ => (Put::None, 0, i),
                };
                raw.literal = (n / 2) as u8;
                raw.literal_len = len as u8;
                (i64::from_le_bytes(text), false)
            }
            _ => return None,
        };
        // Memo indices (`h`, `j`) are at most u32::MAX.
        if n % 2 == 0 {
            *raw.keys.get_mut(n / 2)? = item as u32;
        } else {
            *raw.values.get_mut(n / 2)? = item;
            raw.memo |= (memo as u8) << (n / 2);
        }
    }
    None
}

/// `raw` as the entry it is: its references looked up in `memo` and its keys the
/// objects `keys` holds in the slots `order` gives (the entry before's), with `next_id`
/// the id of the dict's object; `None` where anything differs.
pub fn resolve(
    raw: &Raw,
    memo: &Memo,
    keys: &KeyIds,
    order: &KeyOrder,
    next_id: usize,
) -> Option<Resolved> {
    let put_at = match raw.put {
        Put::Next => Some(memo.len()),
        Put::At => Some(raw.put_at as usize),
        Put::None => None,
    };
    let literal_at = match (raw.literal_put, raw.put) {
        _ if raw.literal == NO_LITERAL => None,
        (Put::None, _) => None,
        (Put::At, _) => Some(raw.literal_put_at as usize),
        // MEMOIZE puts at the memo's length, which the dict's put made one longer.
        (Put::Next, Put::Next | Put::None) => Some(memo.len() + put_at.is_some() as usize),
        (Put::Next, Put::At) => return None,
    };
    // Indices this entry puts at must be new ones (so the lengths above hold), and a
    // reference to one of them is left to the machine, which puts first.
    let fresh = |i: Option<usize>| i.is_none_or(|i| memo.get(i).is_none());
    if !fresh(put_at) || !fresh(literal_at) || (put_at.is_some() && put_at == literal_at) {
        return None;
    }
    let before_put = |k: usize| (Some(k) != put_at && Some(k) != literal_at).then_some(k);
    let literal_id = next_id + 1;
    let mut e = Entry::empty();
    for (pair, &slot) in order.iter().enumerate().take(raw.pairs as usize) {
        let slot = slot as usize;
        // Keys are memo references (`scan` takes nothing else).
        let kid = before_put(raw.keys[pair] as usize).and_then(|k| memo.str(k))?;
        if keys.get(slot) != Some(&Some(kid)) || e.has(slot) {
            return None;
        }
        let value = raw.values[pair];
        let value = if pair == raw.literal as usize {
            Value::Str(literal_id)
        } else if raw.memo & (1 << pair) != 0 {
            let k = usize::try_from(value).ok().and_then(before_put)?;
            memo.get(k)?
        } else {
            Value::Int(value)
        };
        if !e.set(slot, value) {
            return None;
        }
    }
    if !e.complete() {
        return None;
    }
    let literal = (raw.literal != NO_LITERAL).then(|| {
        let bytes = raw.values[raw.literal as usize].to_le_bytes();
        let text = &bytes[..raw.literal_len as usize];
        (String::from_utf8_lossy(text).into_owned(), literal_at)
    });
    Some(Resolved {
        put: put_at,
        entry: e,
        literal,
    })
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// A little-endian two's complement integer of at most 8 bytes (LONG1), without the
/// call a slice copy makes.
fn signed(b: &[u8]) -> i64 {
    if b.is_empty() {
        return 0;
    }
    let v = b.iter().rev().fold(0u64, |v, &byte| (v << 8) | byte as u64);
    let unused = 64 - 8 * b.len() as u32;
    ((v << unused) as i64) >> unused
}
