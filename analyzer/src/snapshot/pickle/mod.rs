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
//! never grows past O(N) in memory, whatever it shares.

use std::fmt;

mod machine;
mod text;

pub use machine::parse;

/// One value of the pickle. Containers and strings are indices into `Pickle::objects`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i128),
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
}

/// A decoded pickle: its root value and the arena the value points into.
#[derive(Debug)]
pub struct Pickle {
    pub objects: Vec<Object>,
    pub root: Value,
    /// The protocol named by the `PROTO` opcode (0 when there is none).
    pub protocol: u8,
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

    pub fn dict(&self, v: Value) -> Option<&[(Value, Value)]> {
        match v {
            Value::Dict(id) => match &self.objects[id] {
                Object::Dict(d) => Some(d),
                _ => None,
            },
            _ => None,
        }
    }

    /// `d[key]` for a dict with string keys (the last one wins, as in Python).
    pub fn get(&self, d: Value, key: &str) -> Option<Value> {
        self.dict(d)?
            .iter()
            .rev()
            .find(|(k, _)| self.str(*k) == Some(key))
            .map(|(_, v)| *v)
    }

    pub fn int(&self, v: Value) -> Option<i128> {
        match v {
            Value::Int(i) => Some(i),
            Value::Bool(b) => Some(b as i128),
            _ => None,
        }
    }

    pub fn float(&self, v: Value) -> Option<f64> {
        match v {
            Value::Float(f) => Some(f),
            Value::Int(i) => Some(i as f64),
            _ => None,
        }
    }
}
