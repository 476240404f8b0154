//! A data-only unpickler: the plain-data subset of Python's pickle protocols 0-5.
//!
//! Why not the `serde-pickle` crate: it never executes anything, but it cannot be told to
//! refuse code-carrying opcodes either. It accepts `GLOBAL`, `REDUCE`, `BUILD`, `NEWOBJ`
//! and friends silently (standing in an empty dict or a placeholder for the object) and only
//! fails later, at conversion, without the offset or the opcode. A snapshot is plain data,
//! so anything else in the file means it is not what it claims to be: we want to stop at
//! the first such opcode and say where it is. The subset is small, so it is written here.
//!
//! Values live in an arena (`Pickle::objects`) and refer to each other by index, so a memo
//! reference (`BINGET`) costs one word however large the object it names: a file of N bytes
//! never grows past O(N) in memory, whatever it shares, and `budget.rs` bounds the factor.
//! A value is 16 bytes, a memo slot 4 (`memo.rs`), the file is read as a stream (never held
//! whole), and history entries are kept as fixed records (`entry.rs`): a snapshot decodes
//! to about 1.4 times its size.

use std::borrow::Cow;
use std::fmt;

mod ahead;
mod budget;
pub mod entry;
mod fast;
mod input;
mod machine;
mod memo;
mod text;

pub use entry::Entry;
pub use machine::{parse, parse_opcode_by_opcode, parse_reader};

/// One value of the pickle. Containers and strings are indices into `Pickle::objects`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside i64 (LONG1/LONG4 of up to 16 bytes): an `Object::BigInt`.
    BigInt(usize),
    Float(f64),
    Str(usize),
    Bytes(usize),
    List(usize),
    Tuple(usize),
    Dict(usize),
    /// A set or frozenset: read as its elements.
    Set(usize),
}

#[derive(Debug)]
pub enum Object {
    Str(String),
    Bytes(Vec<u8>),
    /// Lists, tuples and sets.
    Seq(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// A dict that is a history entry, kept compact (`entry.rs`).
    Entry(Entry),
    /// Boxed: an `i128` would align every object to 16 bytes, and make each 8 larger.
    BigInt(Box<i128>),
}

// A history entry is one object: its size is most of a decoded snapshot's.
const _: () = assert!(std::mem::size_of::<Object>() <= 64);

impl Object {
    /// Bytes the object holds outside itself (what the memory budget counts).
    fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        match self {
            Object::Str(s) => s.capacity(),
            Object::Bytes(b) => b.capacity(),
            Object::Seq(v) => held(v.capacity(), v.len(), size_of::<Value>()),
            Object::Dict(d) => held(d.capacity(), d.len(), size_of::<(Value, Value)>()),
            Object::Entry(_) => 0,
            Object::BigInt(_) => size_of::<i128>(),
        }
    }
}

/// A vector's bytes as the budget counts them: a large one by length, since what doubling
/// reserves past it is never touched (a list of a million `None`s is 16 bytes an item, not
/// 32); a small one by capacity, since its room lies in pages the heap has touched.
fn held(capacity: usize, len: usize, item: usize) -> usize {
    if capacity * item <= 128 << 10 {
        capacity * item
    } else {
        len * item
    }
}

/// A decoded pickle: its root value and the arena the value points into.
#[derive(Debug)]
pub struct Pickle {
    pub objects: Vec<Object>,
    pub root: Value,
    /// The protocol named by the `PROTO` opcode (0 when there is none).
    pub protocol: u8,
    /// Bytes read up to and including the STOP opcode.
    pub len: usize,
    /// The key objects history entries were read with (`entry.rs`).
    pub(crate) entry_keys: entry::KeyIds,
    /// History entries read in one step (`fast.rs`) rather than opcode by opcode: what
    /// tests check the one-step reading was used with.
    pub entries_in_one_step: usize,
    /// What the decoded objects count in the memory budget, given back when they go.
    _budget: budget::Budget,
}

/// Why a pickle was not read: the byte offset of the opcode, and what went wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct PickleError {
    pub offset: usize,
    pub kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ErrorKind {
    /// An opcode that imports, calls or builds a Python object: never executed, refused.
    CodeCarrying { opcode: u8, name: &'static str },
    /// A byte that is no pickle opcode this reader knows.
    Unknown(u8),
    /// Anything else: truncated file, bad stack, bad argument.
    Malformed(String),
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::CodeCarrying { opcode, name } => write!(
                f,
                "byte {}: refused opcode {name} (0x{opcode:02x}): it imports or calls Python code; \
                 only plain-data pickles (dicts, lists, strings, numbers) are read, and nothing in the file is executed",
                self.offset
            ),
            ErrorKind::Unknown(op) => {
                write!(f, "byte {}: unknown pickle opcode 0x{op:02x}", self.offset)
            }
            ErrorKind::Malformed(msg) => write!(f, "byte {}: {msg}", self.offset),
        }
    }
}

impl std::error::Error for PickleError {}

/// The opcodes that carry code, with their names in `pickletools`.
fn code_carrying(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

/// Reading a decoded pickle: typed views of values, `None` where the type differs.
impl Pickle {
    pub fn str(&self, v: Value) -> Option<&str> {
        match v {
            Value::Str(id) => match &self.objects[id] {
                Object::Str(s) => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// A list, tuple or set's elements.
    pub fn seq(&self, v: Value) -> Option<&[Value]> {
        match v {
            Value::List(id) | Value::Tuple(id) | Value::Set(id) => match &self.objects[id] {
                Object::Seq(s) => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn is_dict(&self, v: Value) -> bool {
        matches!(v, Value::Dict(_))
    }

    /// A dict's pairs, in the file's order (a history entry's rebuilt: its known keys
    /// first).
    pub fn dict(&self, v: Value) -> Option<Cow<'_, [(Value, Value)]>> {
        match v {
            Value::Dict(id) => match &self.objects[id] {
                Object::Dict(d) => Some(Cow::Borrowed(d)),
                Object::Entry(e) => {
                    let rest = e.rest().and_then(|r| match &self.objects[r] {
                        Object::Dict(d) => Some(d.as_slice()),
                        _ => None,
                    });
                    Some(Cow::Owned(e.pairs(&self.entry_keys, rest.unwrap_or(&[]))))
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The history entry `v` was kept as, if it was.
    pub fn entry(&self, v: Value) -> Option<&Entry> {
        match v {
            Value::Dict(id) => match &self.objects[id] {
                Object::Entry(e) => Some(e),
                _ => None,
            },
            _ => None,
        }
    }

    /// `d[key]` for a dict with string keys (the last one wins, as in Python).
    pub fn get(&self, d: Value, key: &str) -> Option<Value> {
        let Value::Dict(id) = d else { return None };
        let pairs = match &self.objects[id] {
            Object::Dict(pairs) => pairs,
            Object::Entry(e) => {
                if let Some(v) = e.get(key) {
                    return Some(v);
                }
                match &self.objects[e.rest()?] {
                    Object::Dict(pairs) => pairs,
                    _ => return None,
                }
            }
            _ => return None,
        };
        pairs
            .iter()
            .rev()
            .find(|(k, _)| self.str(*k) == Some(key))
            .map(|(_, v)| *v)
    }

    pub fn int(&self, v: Value) -> Option<i128> {
        match v {
            Value::Int(i) => Some(i as i128),
            Value::BigInt(id) => match &self.objects[id] {
                Object::BigInt(i) => Some(**i),
                _ => None,
            },
            Value::Bool(b) => Some(b as i128),
            _ => None,
        }
    }

    pub fn float(&self, v: Value) -> Option<f64> {
        match v {
            Value::Float(f) => Some(f),
            Value::Int(_) | Value::BigInt(_) => self.int(v).map(|i| i as f64),
            _ => None,
        }
    }
}
