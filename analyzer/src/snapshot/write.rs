//! Writes a snapshot as a pickle that pytorch.org/memory_viz opens.
//!
//! Protocol 4, and only opcodes that viewer's own unpickler knows: `PROTO`, `EMPTY_DICT`,
//! `EMPTY_LIST`, `MARK`, `SETITEMS`, `APPENDS`, `TUPLE2`, `SHORT_BINUNICODE`, `BINUNICODE`,
//! `BININT1`, `BININT2`, `BININT`, `LONG1` (8 bytes at most), `BINFLOAT`, `NONE`, `NEWTRUE`,
//! `NEWFALSE`, `MEMOIZE`, `BINGET`, `LONG_BINGET`, `STOP`. No `FRAME` (optional
//! in protocol 4). Lists and dicts go out in batches of 1000, as Python's pickler does:
//! the viewer spreads each batch into a JavaScript call, which has an argument limit.

use super::figures::figures_of;
use super::model::{BlockState, Frame, Segment, Snapshot, TraceEntry};
use crate::model::Map;
use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

const BATCH: usize = 1000;

/// The plain-data values the writer emits, borrowing the snapshot's strings and frames.
enum Py<'a> {
    None,
    Bool(bool),
    Float(f64),
    Int(i128),
    Str(Cow<'a, str>),
    Tuple2(Box<Py<'a>>, Box<Py<'a>>),
    List(Vec<Py<'a>>),
    Dict(Vec<(Cow<'static, str>, Py<'a>)>),
    /// A frame list, written as dicts of `filename`, `line` and `name` without a value
    /// made for each: a hundred thousand entries of tens of frames each.
    Frames(&'a [Frame]),
    /// A device's history, each entry written as its dict without a value made for it.
    Entries(&'a [TraceEntry]),
}

fn s(v: &str) -> Py<'_> {
    Py::Str(Cow::Borrowed(v))
}
fn dict<'a>(pairs: Vec<(&'static str, Py<'a>)>) -> Py<'a> {
    Py::Dict(
        pairs
            .into_iter()
            .map(|(k, v)| (Cow::Borrowed(k), v))
            .collect(),
    )
}
fn int<'a>(v: impl Into<i128>) -> Py<'a> {
    Py::Int(v.into())
}

/// JSON (allocator settings) as pickle values.
fn json(v: &serde_json::Value) -> Py<'_> {
    use serde_json::Value as J;
    match v {
        J::Null => Py::None,
        J::Bool(b) => Py::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => int(i),
            (_, Some(u)) => int(u),
            _ => Py::Float(n.as_f64().unwrap_or(0.0)),
        },
        J::String(st) => s(st),
        J::Array(a) => Py::List(a.iter().map(json).collect()),
        J::Object(o) => Py::Dict(
            o.iter()
                .map(|(k, x)| (Cow::Owned(k.clone()), json(x)))
                .collect(),
        ),
    }
}

fn segment(device: i64, seg: &Segment) -> Py<'_> {
    let f = figures_of(std::slice::from_ref(seg));
    let requested: u64 = seg
        .blocks
        .iter()
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| b.requested_size.unwrap_or(b.size))
        .fold(0, u64::saturating_add);
    let blocks = seg
        .blocks
        .iter()
        .map(|b| {
            dict(vec![
                ("address", int(b.address)),
                ("size", int(b.size)),
                ("requested_size", int(b.requested_size.unwrap_or(b.size))),
                ("state", s(b.state.name())),
                ("frames", Py::Frames(&b.frames)),
            ])
        })
        .collect();
    dict(vec![
        ("device", int(device)),
        ("address", int(seg.address)),
        ("total_size", int(seg.total_size)),
        ("allocated_size", int(f.allocated)),
        (
            "active_size",
            int(f.allocated.saturating_add(f.pending_free)),
        ),
        ("requested_size", int(requested)),
        ("stream", int(seg.stream)),
        ("segment_type", s(&seg.segment_type)),
        ("segment_pool_id", {
            let (owner, id) = seg.segment_pool_id.unwrap_or((0, 0));
            Py::Tuple2(Box::new(int(owner)), Box::new(int(id)))
        }),
        ("is_expandable", Py::Bool(seg.is_expandable)),
        ("frames", Py::Frames(&seg.frames)),
        ("blocks", Py::List(blocks)),
    ])
}

fn snapshot(snap: &Snapshot) -> Py<'_> {
    let segments = snap
        .devices
        .iter()
        .flat_map(|d| d.segments.iter().map(|seg| segment(d.device, seg)))
        .collect();
    let n = snap
        .devices
        .iter()
        .map(|d| d.device.max(0) as usize + 1)
        .max()
        .unwrap_or(0)
        .max(snap.device_count.unwrap_or(0));
    let traces = (0..n)
        .map(|i| Py::Entries(snap.device(i as i64).map_or(&[][..], |d| &d.trace)))
        .collect();
    let mut top = vec![
        ("segments", Py::List(segments)),
        ("device_traces", Py::List(traces)),
    ];
    if !snap.external_annotations.is_empty() {
        let notes = snap
            .external_annotations
            .iter()
            .map(|a| {
                dict(vec![
                    ("stage", s(if a.start { "START" } else { "END" })),
                    ("name", s(&a.name)),
                    ("device", int(a.device)),
                    ("time_us", int(a.time_us)),
                ])
            })
            .collect();
        top.push(("external_annotations", Py::List(notes)));
    }
    if let Some(settings) = &snap.allocator_settings {
        top.push((
            "allocator_settings",
            Py::Dict(
                settings
                    .iter()
                    .map(|(k, v)| (Cow::Owned(k.clone()), json(v)))
                    .collect(),
            ),
        ));
    }
    dict(top)
}

struct Pickler {
    out: Vec<u8>,
    memo: Map<String, u32>,
}

impl Pickler {
    fn str(&mut self, v: &str) {
        if let Some(&i) = self.memo.get(v) {
            if i < 256 {
                self.out.extend([b'h', i as u8]);
            } else {
                self.out.push(b'j');
                self.out.extend(i.to_le_bytes());
            }
            return;
        }
        let b = v.as_bytes();
        if b.len() < 256 {
            self.out.extend([0x8c, b.len() as u8]);
        } else {
            self.out.push(b'X');
            self.out.extend((b.len() as u32).to_le_bytes());
        }
        self.out.extend(b);
        self.out.push(0x94); // MEMOIZE
        let i = self.memo.len() as u32;
        self.memo.insert(v.to_string(), i);
    }

    fn int(&mut self, v: i128) {
        if (0..256).contains(&v) {
            self.out.extend([b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.out.push(b'M');
            self.out.extend((v as u16).to_le_bytes());
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            self.out.push(b'J');
            self.out.extend((v as i32).to_le_bytes());
        } else {
            // Shortest two's complement; the viewer reads at most 8 bytes, so clamp to i64.
            let v = v.clamp(i64::MIN as i128, i64::MAX as i128);
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let top = bytes[n - 1];
                let below_sign = bytes[n - 2] & 0x80;
                if (top == 0 && below_sign == 0) || (top == 0xff && below_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.extend([0x8a, n as u8]);
            self.out.extend(&bytes[..n]);
        }
    }

    fn value(&mut self, v: &Py) {
        match v {
            Py::None => self.out.push(b'N'),
            Py::Float(f) => {
                self.out.push(b'G');
                self.out.extend(f.to_be_bytes());
            }
            Py::Bool(true) => self.out.push(0x88),
            Py::Bool(false) => self.out.push(0x89),
            Py::Int(i) => self.int(*i),
            Py::Str(st) => self.str(st),
            Py::Tuple2(a, b) => {
                self.value(a);
                self.value(b);
                self.out.push(0x86);
            }
            Py::List(items) => self.list(items, Pickler::value),
            Py::Frames(frames) => self.frames(frames),
            Py::Entries(entries) => self.list(entries, Pickler::entry),
            Py::Dict(pairs) => {
                self.out.push(b'}');
                for chunk in pairs.chunks(BATCH) {
                    self.out.push(b'(');
                    for (k, v) in chunk {
                        self.str(k);
                        self.value(v);
                    }
                    self.out.push(b'u');
                }
            }
        }
    }
}

impl Pickler {
    /// A list of `items`, each written by `item`, appended in batches.
    fn list<T>(&mut self, items: &[T], mut item: impl FnMut(&mut Self, &T)) {
        self.out.push(b']');
        for chunk in items.chunks(BATCH) {
            self.out.push(b'(');
            for i in chunk {
                item(self, i);
            }
            self.out.push(b'e');
        }
    }

    fn frames(&mut self, frames: &[Frame]) {
        self.list(frames, |p, f| {
            p.out.extend([b'}', b'(']);
            p.str("filename");
            p.str(&f.filename);
            p.str("line");
            p.int(f.line.into());
            p.str("name");
            p.str(&f.name);
            p.out.push(b'u');
        });
    }

    /// A history entry's dict: `action`, `addr` (`device_free` for an `oom`), `size`,
    /// `stream`, `time_us` where known, `frames`, and `user_metadata` where it has one.
    fn entry(&mut self, e: &TraceEntry) {
        self.out.extend([b'}', b'(']);
        self.str("action");
        self.str(e.action.name());
        if e.action == super::model::Action::Oom {
            self.str("device_free");
            self.int(e.device_free.unwrap_or(0).into());
        } else {
            self.str("addr");
            self.int(e.addr.into());
        }
        self.str("size");
        self.int(e.size.into());
        self.str("stream");
        self.int(e.stream.into());
        if let Some(t) = e.time_us {
            self.str("time_us");
            self.int(t.into());
        }
        self.str("frames");
        self.frames(&e.frames);
        if let Some(m) = e.user_metadata() {
            self.str("user_metadata");
            self.value(&json(m));
        }
        self.out.push(b'u');
    }
}

/// The bytes of a memory_viz pickle of `snap`.
pub fn memory_viz_bytes(snap: &Snapshot) -> Vec<u8> {
    let mut p = Pickler {
        out: vec![0x80, 4],
        memo: Map::default(),
    };
    p.value(&snapshot(snap));
    p.out.push(b'.');
    p.out
}

/// Writes `snap` to `path` as a `_dump_snapshot()`-shaped pickle for pytorch.org/memory_viz.
pub fn write_memory_viz(path: &Path, snap: &Snapshot) -> Result<(), String> {
    let bytes = memory_viz_bytes(snap);
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(&bytes))
        .map_err(|e| format!("{}: cannot write: {e}", path.display()))
}
