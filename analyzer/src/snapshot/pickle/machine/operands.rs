//! The operands of an opcode: lengths, lines, integers and strings read from the input.

use super::super::text::{c_string, python_int, unescape};
use super::super::{ErrorKind, Object, PickleError, Value};
use super::{Machine, LARGE, R};

impl Machine<'_> {
    pub(super) fn err(&self, msg: String) -> PickleError {
        PickleError {
            offset: self.at,
            kind: ErrorKind::Malformed(msg),
        }
    }

    pub(super) fn take(&mut self, n: usize) -> R<&[u8]> {
        let at = self.at;
        if let Err(left) = self.input.take(n) {
            return Err(PickleError {
                offset: at,
                kind: ErrorKind::Malformed(format!(
                    "the pickle ends inside an argument ({n} bytes wanted, {left} left)"
                )),
            });
        }
        // Its copy (a latin-1 one up to twice its size, and as much again while it
        // grows), once the bytes are there: a length field of 2^60 in a short file is a
        // truncated file, not a refusal.
        if n > LARGE {
            self.check_room(n.saturating_mul(4))?;
        }
        Ok(self.input.last(n, 0))
    }

    pub(super) fn bytes<const N: usize>(&mut self) -> R<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("take gives N bytes"))
    }

    pub(super) fn u8(&mut self) -> R<u8> {
        Ok(self.bytes::<1>()?[0])
    }

    pub(super) fn len4(&mut self) -> R<usize> {
        Ok(u32::from_le_bytes(self.bytes::<4>()?) as usize)
    }

    pub(super) fn len8(&mut self) -> R<usize> {
        let n = u64::from_le_bytes(self.bytes::<8>()?);
        usize::try_from(n).map_err(|_| self.err(format!("length {n} too large")))
    }

    /// A protocol 0 argument: bytes up to the next newline, as latin-1.
    pub(super) fn line(&mut self) -> R<String> {
        let Some(len) = self.input.line().map(<[u8]>::len) else {
            return Err(self.err("the pickle ends inside a text argument".into()));
        };
        // The line as latin-1 text (up to twice its bytes, and as much again while the
        // text grows), and what is made of that (as much again: `V`'s unescaping).
        if len > LARGE {
            self.check_room(len.saturating_mul(8))?;
        }
        let b = self.input.last(len, 1);
        Ok(b.iter().map(|&c| c as char).collect())
    }

    pub(super) fn utf8(&mut self, n: usize) -> R<String> {
        let b = self.take(n)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.err("a string that is not UTF-8".into())),
        }
    }

    /// An integer value: inline where it fits 64 bits.
    pub(super) fn int(&mut self, i: i128) -> Value {
        match i64::try_from(i) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(self.alloc(Object::BigInt(Box::new(i)))),
        }
    }

    /// INT's and LONG's argument, as Python's `int(s, 0)` reads it.
    pub(super) fn parse_int(&self, s: &str) -> R<i128> {
        python_int(s, true).ok_or_else(|| self.err(format!("bad integer argument {s:?}")))
    }

    /// A little-endian two's complement integer of `n` bytes (LONG1, LONG4).
    pub(super) fn long(&mut self, n: usize) -> R<i128> {
        if n > 16 {
            return Err(self.err(format!("an integer of {n} bytes is too large")));
        }
        let b = self.take(n)?;
        if n == 0 {
            return Ok(0);
        }
        let negative = b[n - 1] & 0x80 != 0;
        let mut full = [if negative { 0xff } else { 0 }; 16];
        full[..n].copy_from_slice(b);
        Ok(i128::from_le_bytes(full))
    }

    pub(super) fn python2_string(&self, line: &str) -> R<String> {
        let s = line.trim_end();
        let quoted = s.len() >= 2
            && ((s.starts_with('\'') && s.ends_with('\''))
                || (s.starts_with('"') && s.ends_with('"')));
        if !quoted {
            return Err(self.err(format!("bad STRING argument {s:?}")));
        }
        Ok(unescape(&s[1..s.len() - 1]))
    }

    /// GET's and PUT's argument, as Python's `int(line)` reads it (a negative one, which
    /// Python's dict memo takes, is refused: no pickler writes one).
    pub(super) fn memo_index(&self, line: &str) -> R<usize> {
        python_int(c_string(line), false)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| self.err(format!("bad memo index {line:?}")))
    }
}
