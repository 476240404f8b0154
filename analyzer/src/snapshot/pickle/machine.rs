//! The pickle machine: one opcode at a time, onto a stack, a memo and the object arena.

use super::text::{raw_unicode_escape, unescape};
use super::{code_carrying, ErrorKind, Object, Pickle, PickleError, Value};
use crate::model::Map;

/// An item of the machine's stack: a value, or a MARK.
#[derive(Clone, Copy)]
enum Item {
    Mark,
    V(Value),
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being run, for errors.
    at: usize,
    stack: Vec<Item>,
    /// By index. A map, not a vector indexed by it: a pickler numbers its memo from 0
    /// upward, but a file may name any index, and a few bytes naming ever larger ones must
    /// not allocate for every index in between.
    memo: Map<usize, Value>,
    objects: Vec<Object>,
}

type R<T> = Result<T, PickleError>;

/// Reads a whole pickle. Stops at the first code-carrying opcode, unknown opcode or
/// malformed argument, with the offset of that opcode.
pub fn parse(data: &[u8]) -> Result<Pickle, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        at: 0,
        stack: Vec::new(),
        memo: Map::default(),
        objects: Vec::new(),
    };
    let mut protocol = 0;
    loop {
        m.at = m.pos;
        let op = *m
            .data
            .get(m.pos)
            .ok_or_else(|| m.err("the pickle ends without a STOP opcode".into()))?;
        m.pos += 1;
        if let Some(name) = code_carrying(op) {
            return Err(PickleError {
                offset: m.at,
                kind: ErrorKind::CodeCarrying { opcode: op, name },
            });
        }
        match op {
            0x80 => {
                protocol = m.take(1)?[0];
                if protocol > 5 {
                    return Err(m.err(format!("unsupported pickle protocol {protocol}")));
                }
            }
            0x95 => {
                m.take(8)?; // FRAME: a length hint; the data simply follows
            }
            b'.' => {
                let root = m.pop_value()?;
                return Ok(Pickle {
                    objects: m.objects,
                    root,
                    protocol,
                });
            }
            b'(' => m.stack.push(Item::Mark),
            b'0' => {
                m.pop()?;
            }
            b'1' => {
                m.pop_mark()?;
            }
            b'2' => {
                let top = m.peek()?;
                m.push(top);
            }
            // Constants and numbers.
            b'N' => m.push(Value::None),
            0x88 => m.push(Value::Bool(true)),
            0x89 => m.push(Value::Bool(false)),
            b'I' => {
                let line = m.line()?;
                let v = match line.as_str() {
                    "01" => Value::Bool(true),
                    "00" => Value::Bool(false),
                    s => Value::Int(m.parse_int(s)?),
                };
                m.push(v);
            }
            b'L' => {
                let line = m.line()?;
                let v = m.parse_int(line.trim_end_matches('L'))?;
                m.push(Value::Int(v));
            }
            b'J' => {
                let b = m.take(4)?;
                m.push(Value::Int(i32::from_le_bytes(b.try_into().unwrap()) as i128));
            }
            b'K' => {
                let b = m.take(1)?;
                m.push(Value::Int(b[0] as i128));
            }
            b'M' => {
                let b = m.take(2)?;
                m.push(Value::Int(u16::from_le_bytes([b[0], b[1]]) as i128));
            }
            0x8a => {
                let n = m.take(1)?[0] as usize;
                let v = m.long(n)?;
                m.push(Value::Int(v));
            }
            0x8b => {
                let n = m.len4()?;
                let v = m.long(n)?;
                m.push(Value::Int(v));
            }
            b'F' => {
                let line = m.line()?;
                let v: f64 = line
                    .trim()
                    .parse()
                    .map_err(|_| m.err(format!("bad FLOAT argument {line:?}")))?;
                m.push(Value::Float(v));
            }
            b'G' => {
                let b = m.take(8)?;
                m.push(Value::Float(f64::from_be_bytes(b.try_into().unwrap())));
            }
            // Strings and bytes.
            b'S' => {
                let line = m.line()?;
                let s = m.python2_string(&line)?;
                m.push_str(s);
            }
            b'T' => {
                let n = m.len4()?;
                let b = m.take(n)?.to_vec();
                m.push_str(b.iter().map(|&c| c as char).collect());
            }
            b'U' => {
                let n = m.take(1)?[0] as usize;
                let b = m.take(n)?.to_vec();
                m.push_str(b.iter().map(|&c| c as char).collect());
            }
            b'V' => {
                let line = m.line()?;
                let s = raw_unicode_escape(&line);
                m.push_str(s);
            }
            b'X' => {
                let n = m.len4()?;
                let s = m.utf8(n)?;
                m.push_str(s);
            }
            0x8c => {
                let n = m.take(1)?[0] as usize;
                let s = m.utf8(n)?;
                m.push_str(s);
            }
            0x8d => {
                let n = m.len8()?;
                let s = m.utf8(n)?;
                m.push_str(s);
            }
            b'B' | 0x8e | b'C' | 0x96 => {
                let n = match op {
                    b'B' => m.len4()?,
                    b'C' => m.take(1)?[0] as usize,
                    _ => m.len8()?,
                };
                let b = m.take(n)?.to_vec();
                let id = m.alloc(Object::Bytes(b));
                m.push(Value::Bytes(id));
            }
            // Containers.
            b']' => {
                let id = m.alloc(Object::Seq(Vec::new()));
                m.push(Value::List(id));
            }
            b'l' => {
                let items = m.pop_mark()?;
                let id = m.alloc(Object::Seq(items));
                m.push(Value::List(id));
            }
            b')' => {
                let id = m.alloc(Object::Seq(Vec::new()));
                m.push(Value::Tuple(id));
            }
            b't' => {
                let items = m.pop_mark()?;
                let id = m.alloc(Object::Seq(items));
                m.push(Value::Tuple(id));
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(m.pop_value()?);
                }
                items.reverse();
                let id = m.alloc(Object::Seq(items));
                m.push(Value::Tuple(id));
            }
            b'a' => {
                let v = m.pop_value()?;
                let list = m.peek()?;
                m.extend_seq(list, vec![v])?;
            }
            b'e' => {
                let items = m.pop_mark()?;
                let list = m.peek()?;
                m.extend_seq(list, items)?;
            }
            b'}' => {
                let id = m.alloc(Object::Dict(Vec::new()));
                m.push(Value::Dict(id));
            }
            b'd' => {
                let items = m.pop_mark()?;
                let pairs = m.pairs(items)?;
                let id = m.alloc(Object::Dict(pairs));
                m.push(Value::Dict(id));
            }
            b's' => {
                let v = m.pop_value()?;
                let k = m.pop_value()?;
                let dict = m.peek()?;
                m.extend_dict(dict, vec![(k, v)])?;
            }
            b'u' => {
                let items = m.pop_mark()?;
                let pairs = m.pairs(items)?;
                let dict = m.peek()?;
                m.extend_dict(dict, pairs)?;
            }
            0x8f => {
                let id = m.alloc(Object::Seq(Vec::new()));
                m.push(Value::Set(id));
            }
            0x90 => {
                let items = m.pop_mark()?;
                let set = m.peek()?;
                m.extend_seq(set, items)?;
            }
            0x91 => {
                let items = m.pop_mark()?;
                let id = m.alloc(Object::Seq(items));
                m.push(Value::Set(id));
            }
            // Memo.
            b'g' => {
                let line = m.line()?;
                let i = m.memo_index(&line)?;
                m.get(i)?;
            }
            b'h' => {
                let i = m.take(1)?[0] as usize;
                m.get(i)?;
            }
            b'j' => {
                let i = m.len4()?;
                m.get(i)?;
            }
            b'p' => {
                let line = m.line()?;
                let i = m.memo_index(&line)?;
                m.put(i)?;
            }
            b'q' => {
                let i = m.take(1)?[0] as usize;
                m.put(i)?;
            }
            b'r' => {
                let i = m.len4()?;
                m.put(i)?;
            }
            0x94 => {
                let i = m.memo.len();
                m.put(i)?;
            }
            other => {
                return Err(PickleError {
                    offset: m.at,
                    kind: ErrorKind::Unknown(other),
                })
            }
        }
    }
}

impl<'a> Machine<'a> {
    fn err(&self, msg: String) -> PickleError {
        PickleError {
            offset: self.at,
            kind: ErrorKind::Malformed(msg),
        }
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let data: &'a [u8] = self.data;
                let s = &data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.err(format!(
                "the pickle ends inside an argument ({n} bytes wanted, {} left)",
                self.data.len() - self.pos
            ))),
        }
    }

    fn len4(&mut self) -> R<usize> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap()) as usize)
    }

    fn len8(&mut self) -> R<usize> {
        let b = self.take(8)?;
        let n = u64::from_le_bytes(b.try_into().unwrap());
        usize::try_from(n).map_err(|_| self.err(format!("length {n} too large")))
    }

    /// A protocol 0 argument: bytes up to the next newline, as latin-1.
    fn line(&mut self) -> R<String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or_else(|| self.err("the pickle ends inside a text argument".into()))?;
        let s = rest[..end].iter().map(|&c| c as char).collect();
        self.pos += end + 1;
        Ok(s)
    }

    fn utf8(&mut self, n: usize) -> R<String> {
        let b = self.take(n)?.to_vec();
        String::from_utf8(b).map_err(|_| self.err("a string that is not UTF-8".into()))
    }

    fn parse_int(&self, s: &str) -> R<i128> {
        s.trim()
            .parse()
            .map_err(|_| self.err(format!("bad integer argument {s:?}")))
    }

    /// A little-endian two's complement integer of `n` bytes (LONG1, LONG4).
    fn long(&mut self, n: usize) -> R<i128> {
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

    fn python2_string(&self, line: &str) -> R<String> {
        let s = line.trim_end();
        let quoted = s.len() >= 2
            && ((s.starts_with('\'') && s.ends_with('\''))
                || (s.starts_with('"') && s.ends_with('"')));
        if !quoted {
            return Err(self.err(format!("bad STRING argument {s:?}")));
        }
        Ok(unescape(&s[1..s.len() - 1]))
    }

    fn memo_index(&self, line: &str) -> R<usize> {
        line.trim()
            .parse()
            .map_err(|_| self.err(format!("bad memo index {line:?}")))
    }

    fn alloc(&mut self, o: Object) -> usize {
        self.objects.push(o);
        self.objects.len() - 1
    }

    fn push(&mut self, v: Value) {
        self.stack.push(Item::V(v));
    }

    fn push_str(&mut self, s: String) {
        let id = self.alloc(Object::Str(s));
        self.push(Value::Str(id));
    }

    fn pop(&mut self) -> R<Item> {
        self.stack
            .pop()
            .ok_or_else(|| self.err("an opcode wants a value and the stack is empty".into()))
    }

    fn pop_value(&mut self) -> R<Value> {
        match self.pop()? {
            Item::V(v) => Ok(v),
            Item::Mark => Err(self.err("an opcode wants a value and found a MARK".into())),
        }
    }

    fn peek(&self) -> R<Value> {
        match self.stack.last() {
            Some(Item::V(v)) => Ok(*v),
            Some(Item::Mark) => Err(self.err("an opcode wants a value and found a MARK".into())),
            None => Err(self.err("an opcode wants a value and the stack is empty".into())),
        }
    }

    /// Everything above the topmost MARK, and the MARK itself, popped.
    fn pop_mark(&mut self) -> R<Vec<Value>> {
        let from = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or_else(|| self.err("an opcode wants a MARK and there is none".into()))?;
        let items = self
            .stack
            .drain(from..)
            .skip(1)
            .map(|i| match i {
                Item::V(v) => v,
                Item::Mark => unreachable!("the topmost mark was found"),
            })
            .collect();
        Ok(items)
    }

    fn pairs(&self, items: Vec<Value>) -> R<Vec<(Value, Value)>> {
        if !items.len().is_multiple_of(2) {
            return Err(self.err("a dict with an odd number of keys and values".into()));
        }
        Ok(items.chunks(2).map(|c| (c[0], c[1])).collect())
    }

    fn extend_seq(&mut self, target: Value, items: Vec<Value>) -> R<()> {
        let id = match target {
            Value::List(id) | Value::Set(id) => id,
            _ => return Err(self.err("APPEND or ADDITEMS on something not a list or set".into())),
        };
        match &mut self.objects[id] {
            Object::Seq(v) => v.extend(items),
            _ => unreachable!("list ids name sequences"),
        }
        Ok(())
    }

    fn extend_dict(&mut self, target: Value, pairs: Vec<(Value, Value)>) -> R<()> {
        let Value::Dict(id) = target else {
            return Err(self.err("SETITEM on something not a dict".into()));
        };
        match &mut self.objects[id] {
            Object::Dict(d) => d.extend(pairs),
            _ => unreachable!("dict ids name dicts"),
        }
        Ok(())
    }

    fn get(&mut self, i: usize) -> R<()> {
        match self.memo.get(&i).copied() {
            Some(v) => {
                self.push(v);
                Ok(())
            }
            None => Err(self.err(format!("memo entry {i} read before it was written"))),
        }
    }

    fn put(&mut self, i: usize) -> R<()> {
        let v = self.peek()?;
        self.memo.insert(i, v);
        Ok(())
    }
}
