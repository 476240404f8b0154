//! The pickle machine: one opcode at a time, onto a stack, a memo and the object arena.

use super::ahead::{self, Ahead};
use super::budget;
use super::entry::{KeyIds, KeyOrder};
use super::input::{Input, Source};
use super::memo::Memo;
use super::text::{c_string, c_strtol, raw_unicode_escape};
use super::{code_carrying, ErrorKind, Object, Pickle, PickleError, Value};
use std::io::Read;
use std::sync::mpsc::sync_channel;
use std::sync::Mutex;

mod containers;
mod operands;
mod stack;
#[cfg(test)]
mod tests;

/// An item of the machine's stack: a value, or a MARK.
#[derive(Clone, Copy)]
enum Item {
    Mark,
    V(Value),
}

struct Machine<'r> {
    input: Input<'r>,
    /// Offset of the opcode being run, for errors.
    at: usize,
    stack: Vec<Item>,
    memo: Memo,
    objects: Vec<Object>,
    entry_keys: KeyIds,
    /// The slots of the last entry's keys, in order (`entry::compact`).
    key_order: KeyOrder,
    /// Reused buffers: the values above a MARK, and the keys an entry keeps as a dict.
    marked: Vec<Value>,
    rest: Vec<(Value, Value)>,
    /// Whether history entries are read in one step (`fast.rs`); off only to test that
    /// both paths agree.
    fast: bool,
    /// Bytes the objects hold outside the arena, and opcodes until the next look at the
    /// memory budget (`budget.rs`).
    made: usize,
    until_check: u32,
    budget: budget::Budget,
    entries_in_one_step: usize,
}

type R<T> = Result<T, PickleError>;

/// An argument or line longer than this is checked against the memory budget before it is
/// copied.
const LARGE: usize = 1 << 20;

/// Reads a whole pickle from memory. Stops at the first code-carrying opcode, unknown
/// opcode or malformed argument, with the offset of that opcode.
pub fn parse(data: &[u8]) -> Result<Pickle, PickleError> {
    parse_with(Source::Stream(&mut { data }), true)
}

/// Reads a pickle from a stream, up to its STOP opcode, the stream read ahead on a thread
/// of its own (`ahead.rs`). A read error is reported at the offset where it happened.
pub fn parse_reader(reader: &mut (dyn Read + Send)) -> Result<Pickle, PickleError> {
    parse_ahead(reader, ahead::CHUNK)
}

fn parse_ahead(reader: &mut (dyn Read + Send), chunk: usize) -> Result<Pickle, PickleError> {
    // Taken by the thread, or back here when no thread starts.
    let lent = Mutex::new(Some(reader));
    std::thread::scope(|scope| {
        let (send, chunks) = sync_channel(ahead::AHEAD);
        let started = std::thread::Builder::new()
            .name("snapshot-read".into())
            .spawn_scoped(scope, || {
                if let Some(reader) = lent.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    ahead::read(reader, send, chunk);
                }
            });
        let stream = match started {
            Ok(_) => None,
            Err(_) => lent.lock().unwrap_or_else(|e| e.into_inner()).take(),
        };
        match stream {
            Some(reader) => parse_stream(reader),
            // The machine, and the receiver with it, is dropped before the scope joins
            // the thread: a thread waiting to send then stops.
            None => parse_with(Source::Ahead(Ahead::new(chunks)), true),
        }
    })
}

/// A stream read without a thread ahead (none could start): opcode by opcode, because the
/// one-step reading peeks past what the machine has read, and a read error met there would
/// be reported in place of an earlier error of the machine's own.
fn parse_stream(reader: &mut dyn Read) -> Result<Pickle, PickleError> {
    parse_with(Source::Stream(reader), false)
}

/// [`parse`] opcode by opcode, without the one-step reading of history entries: what
/// tests compare that reading with.
pub fn parse_opcode_by_opcode(data: &[u8]) -> Result<Pickle, PickleError> {
    parse_with(Source::Stream(&mut { data }), false)
}

fn parse_with(source: Source<'_>, fast: bool) -> Result<Pickle, PickleError> {
    let mut m = Machine {
        input: Input::new(source),
        at: 0,
        stack: Vec::new(),
        memo: Memo::default(),
        objects: Vec::new(),
        entry_keys: Default::default(),
        key_order: [u8::MAX; 16],
        marked: Vec::new(),
        rest: Vec::new(),
        fast,
        made: 0,
        until_check: budget::CHECK_EVERY,
        budget: budget::Budget::of_this_machine(),
        entries_in_one_step: 0,
    };
    m.run().map_err(|e| match m.input.error.take() {
        Some(io) => PickleError {
            offset: m.input.offset(),
            kind: ErrorKind::Malformed(format!("cannot read: {io}")),
        },
        None => e,
    })
}

impl Machine<'_> {
    fn run(&mut self) -> R<Pickle> {
        let m = self;
        let mut protocol = 0;
        loop {
            m.at = m.input.offset();
            m.until_check -= 1;
            if m.until_check == 0 {
                m.until_check = budget::CHECK_EVERY;
                m.check_budget()?;
            }
            let Some(op) = m.input.byte() else {
                return Err(m.err("the pickle ends without a STOP opcode".into()));
            };
            if let Some(name) = code_carrying(op) {
                return Err(PickleError {
                    offset: m.at,
                    kind: ErrorKind::CodeCarrying { opcode: op, name },
                });
            }
            match op {
                0x80 => {
                    protocol = m.u8()?;
                    if protocol > 5 {
                        return Err(m.err(format!("unsupported pickle protocol {protocol}")));
                    }
                }
                0x95 => {
                    m.take(8)?; // FRAME: a length hint; the data simply follows
                }
                b'.' => {
                    // What the objects take in the end, for the budget of the next file.
                    m.check_budget()?;
                    let root = m.pop_value()?;
                    return Ok(Pickle {
                        objects: std::mem::take(&mut m.objects),
                        root,
                        protocol,
                        len: m.input.offset(),
                        entry_keys: m.entry_keys,
                        entries_in_one_step: m.entries_in_one_step,
                        _budget: std::mem::replace(&mut m.budget, budget::Budget::within(None)),
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
                    // As Python's C unpickler: C's strtol first (a 0 before digits means
                    // octal), a two-character text read so whole as 0 or 1 a bool, and
                    // `int(text, 0)` where strtol stops early.
                    let line = m.line()?;
                    if line.is_empty() {
                        return Err(m.err("an INT with no argument".into()));
                    }
                    let text = c_string(&line);
                    let v = match c_strtol(text) {
                        Some(x @ (0 | 1)) if line.len() == 2 => Value::Bool(x == 1),
                        Some(x) => Value::Int(x),
                        None => {
                            let i = m.parse_int(text)?;
                            m.int(i)
                        }
                    };
                    m.push(v);
                }
                b'L' => {
                    let line = m.line()?;
                    // Python drops one trailing L (protocol 0 as Python 2 wrote it).
                    let v = m.parse_int(c_string(line.strip_suffix('L').unwrap_or(&line)))?;
                    let v = m.int(v);
                    m.push(v);
                }
                b'J' => {
                    let v = i32::from_le_bytes(m.bytes::<4>()?);
                    m.push(Value::Int(v as i64));
                }
                b'K' => {
                    let v = m.u8()?;
                    m.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = u16::from_le_bytes(m.bytes::<2>()?);
                    m.push(Value::Int(v as i64));
                }
                0x8a => {
                    let n = m.u8()? as usize;
                    let v = m.long(n)?;
                    let v = m.int(v);
                    m.push(v);
                }
                0x8b => {
                    let n = m.len4()?;
                    let v = m.long(n)?;
                    let v = m.int(v);
                    m.push(v);
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
                    let v = f64::from_be_bytes(m.bytes::<8>()?);
                    m.push(Value::Float(v));
                }
                // Strings and bytes.
                b'S' => {
                    let line = m.line()?;
                    let s = m.python2_string(&line)?;
                    m.push_str(s);
                }
                b'T' => {
                    let n = m.len4()?;
                    let b = m.take(n)?.iter().map(|&c| c as char).collect();
                    m.push_str(b);
                }
                b'U' => {
                    let n = m.u8()? as usize;
                    let b = m.take(n)?.iter().map(|&c| c as char).collect();
                    m.push_str(b);
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
                    let n = m.u8()? as usize;
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
                        b'C' => m.u8()? as usize,
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
                    let items = m.pop_mark_owned()?;
                    let id = m.alloc(Object::Seq(items));
                    m.push(Value::List(id));
                }
                b')' => {
                    let id = m.alloc(Object::Seq(Vec::new()));
                    m.push(Value::Tuple(id));
                }
                b't' => {
                    let items = m.pop_mark_owned()?;
                    let id = m.alloc(Object::Seq(items));
                    m.push(Value::Tuple(id));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = vec![Value::None; n];
                    for i in (0..n).rev() {
                        items[i] = m.pop_value()?;
                    }
                    let id = m.alloc(Object::Seq(items));
                    m.push(Value::Tuple(id));
                }
                b'a' => {
                    let v = m.pop_value()?;
                    m.marked.clear();
                    m.marked.push(v);
                    let list = m.peek()?;
                    m.extend_seq(list)?;
                }
                b'e' => {
                    m.pop_mark()?;
                    let list = m.peek()?;
                    m.extend_seq(list)?;
                }
                b'}' => {
                    // Nearly always a history entry, read whole where it can be.
                    if !(m.fast && m.entry()) {
                        let id = m.alloc(Object::Dict(Vec::new()));
                        m.push(Value::Dict(id));
                    }
                }
                b'd' => {
                    m.pop_mark()?;
                    let pairs = m.pairs()?;
                    let id = m.alloc(Object::Dict(pairs));
                    m.push(Value::Dict(id));
                }
                b's' => {
                    let v = m.pop_value()?;
                    let k = m.pop_value()?;
                    m.marked.clear();
                    m.marked.extend([k, v]);
                    let dict = m.peek()?;
                    m.extend_dict(dict, false)?;
                }
                b'u' => {
                    m.pop_mark()?;
                    let dict = m.peek()?;
                    m.extend_dict(dict, true)?;
                }
                0x8f => {
                    let id = m.alloc(Object::Seq(Vec::new()));
                    m.push(Value::Set(id));
                }
                0x90 => {
                    m.pop_mark()?;
                    let set = m.peek()?;
                    m.extend_seq(set)?;
                }
                0x91 => {
                    let items = m.pop_mark_owned()?;
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
                    let i = m.u8()? as usize;
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
                    let i = m.u8()? as usize;
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
}
