//! The history entry as protocols 2-5 write it, read in one step: `EMPTY_DICT`, a memo
//! put, `MARK`, keys that are memo references to the key strings, each followed by a
//! memo reference, a small integer or `None`, and `SETITEMS`. A snapshot is millions of
//! these, and reading one through the stack machine costs 16 opcodes' worth of pushes,
//! pops, a MARK search and a key search per key.
//!
//! [`scan`] only looks: it returns `None` for anything else (a literal string, a new
//! frame list, a key in another order than the entry before, a value of another kind, the
//! end of the window), and the machine then runs the same bytes opcode by opcode. What
//! it returns is what the machine would have made of those bytes, so both paths decode
//! a file to the same objects.

use super::entry::{Entry, KeyIds};
use super::Value;

/// The most bytes one entry read here takes: 16 keys and values of at most 10 bytes.
pub const MAX_BYTES: usize = 400;

/// Where the dict is put in the memo.
#[derive(Clone, Copy)]
pub enum Put {
    /// `MEMOIZE`: at the memo's length.
    Next,
    /// `BINPUT`, `LONG_BINPUT`: at this index.
    At(usize),
}

/// Reads the bytes after an `EMPTY_DICT` (`b`) as a history entry whose keys are the
/// objects `keys` holds, in the slots `order` gives (the entry before's). Returns the
/// bytes read, the memo put and the entry; `None` when the bytes are anything else, with
/// nothing consumed.
pub fn scan(
    b: &[u8],
    memo: &[Value],
    memo_len: usize,
    keys: &KeyIds,
    order: &[u8; 16],
) -> Option<(usize, Option<Put>, Entry)> {
    let (mut i, put) = match *b.first()? {
        0x94 => (1, Some(Put::Next)),
        b'q' => (2, Some(Put::At(*b.get(1)? as usize))),
        b'r' => (5, Some(Put::At(u32_at(b, 1)? as usize))),
        _ => (0, None),
    };
    let put_at = match put {
        Some(Put::Next) => Some(memo_len),
        Some(Put::At(k)) => Some(k),
        None => None,
    };
    if *b.get(i)? != b'(' {
        return None;
    }
    i += 1;
    // A memo entry as it is before the put: one naming the dict itself is left to the
    // machine, which puts first.
    let get = |k: usize| {
        if Some(k) == put_at {
            return None;
        }
        memo.get(k).copied()
    };
    let mut e = Entry::empty();
    for &slot in order {
        let key = match *b.get(i)? {
            b'u' => return e.complete().then_some((i + 1, put, e)),
            b'h' => {
                i += 2;
                get(*b.get(i - 1)? as usize)?
            }
            b'j' => {
                i += 5;
                get(u32_at(b, i - 4)? as usize)?
            }
            _ => return None,
        };
        let slot = slot as usize;
        match (key, keys.get(slot)) {
            (Value::Str(kid), Some(&Some(known))) if kid == known && !e.has(slot) => {}
            _ => return None,
        }
        let op = *b.get(i)?;
        i += 1;
        let v = match op {
            b'h' => {
                i += 1;
                get(*b.get(i - 1)? as usize)?
            }
            b'j' => {
                i += 4;
                get(u32_at(b, i - 4)? as usize)?
            }
            b'K' => {
                i += 1;
                Value::Int(*b.get(i - 1)? as i64)
            }
            b'M' => {
                i += 2;
                Value::Int(u16::from_le_bytes(b.get(i - 2..i)?.try_into().ok()?) as i64)
            }
            b'J' => {
                i += 4;
                Value::Int(u32_at(b, i - 4)? as i32 as i64)
            }
            0x8a => {
                let n = *b.get(i)? as usize;
                if n > 8 {
                    return None;
                }
                let bytes = b.get(i + 1..i + 1 + n)?;
                i += 1 + n;
                Value::Int(signed(bytes))
            }
            _ => return None,
        };
        if !e.set(slot, v) {
            return None;
        }
    }
    None
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
