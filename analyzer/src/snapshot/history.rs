//! A snapshot's history read straight from the decoded pickle, one entry at a time:
//! what the views stream into their replay, and what the model's `TraceEntry` is made of.
//! A million entries never become a million `Vec<Frame>`s here; a frame list is read
//! once per list in the file ([`FrameReader`]), as PyTorch's pickler shares one list per
//! distinct stack.

use super::model::{Action, Frame, Frames};
use super::pickle::entry::{ACTION, FRAMES, INT_KEYS, USER_METADATA};
use super::pickle::{Pickle, Value};
use crate::model::Map;
use std::sync::Arc;

/// Values (segments, blocks, entries, frames, settings, bytes of copied text) reading may
/// visit for a pickle of `len` bytes. A pickle names a shared object in two bytes, so a few
/// KB can nest references to one list a billion times over ("billion laughs"); real
/// snapshots share frame lists between blocks, but never more than a few dozen values per
/// byte of file.
pub fn expansion_budget(len: usize) -> usize {
    len.saturating_mul(64).max(1 << 20)
}

pub const EXPANDS: &str = "it expands to more values than its size allows (one object shared by \
                       reference over and over): refused";

/// One history entry, without its frames (`frames` names the list in the pickle).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub time_us: Option<i64>,
    pub device_free: Option<u64>,
    pub frames: Option<Value>,
    /// `user_metadata` (2.9+), read where an allocation's label is wanted.
    pub user_metadata: Option<Value>,
}

/// The keys [`entry`] reads; the model keeps the others as they are.
pub const KNOWN_KEYS: [&str; 7] = [
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "device_free",
    "frames",
];

/// `d[key]` as an unsigned integer; absent and `None` are `None`.
pub fn u64_of(p: &Pickle, d: Value, key: &str) -> Result<Option<u64>, String> {
    match p.get(d, key) {
        None | Some(Value::None) => Ok(None),
        Some(v) => {
            let i = p
                .int(v)
                .ok_or_else(|| format!("\"{key}\" is not an integer"))?;
            u64::try_from(i)
                .map(Some)
                .map_err(|_| format!("\"{key}\" = {i} is out of range"))
        }
    }
}

/// Reads history entry `e`.
pub fn entry(p: &Pickle, e: Value) -> Result<HistoryEntry, String> {
    // The common case, read from the compact record's fields without looking up keys.
    if let Some(c) = p.entry(e).filter(|c| c.rest().is_none()) {
        let field = |key: usize| match c.int(key) {
            Some(i) => u64::try_from(i)
                .map(Some)
                .map_err(|_| format!("\"{}\" = {i} is out of range", INT_KEYS[key])),
            None => Ok(None),
        };
        let action = c.slot(ACTION).and_then(|a| p.str(a)).unwrap_or_default();
        return Ok(HistoryEntry {
            action: Action::parse(action),
            addr: field(0)?.unwrap_or(0),
            size: field(1)?.unwrap_or(0),
            stream: field(2)?.unwrap_or(0),
            time_us: c.int(3),
            // Kept in `rest` where the entry has it.
            device_free: None,
            frames: c.slot(FRAMES),
            user_metadata: c.slot(USER_METADATA),
        });
    }
    if !p.is_dict(e) {
        return Err("not a dict".into());
    }
    let action_v = p.get(e, "action").ok_or("no \"action\"")?;
    let action = Action::parse(p.str(action_v).ok_or("\"action\" is not a string")?);
    Ok(HistoryEntry {
        action,
        addr: u64_of(p, e, "addr")?.unwrap_or(0),
        size: u64_of(p, e, "size")?.unwrap_or(0),
        stream: u64_of(p, e, "stream")?.unwrap_or(0),
        time_us: p
            .get(e, "time_us")
            .and_then(|v| p.int(v))
            .and_then(|t| i64::try_from(t).ok()),
        device_free: u64_of(p, e, "device_free")?,
        frames: p.get(e, "frames"),
        user_metadata: p.get(e, "user_metadata"),
    })
}

/// `device_traces`: each device's list of entries (a list or tuple), by ordinal; empty when
/// absent. The entries of all devices together are held to the file's expansion budget
/// here, as the views stream them without the model's count: one list of entries shared
/// by thousands of devices is a few KB that would replay for hours.
pub fn device_traces(p: &Pickle) -> Result<Vec<Value>, String> {
    let Some(traces) = p.get(p.root, "device_traces") else {
        return Ok(Vec::new());
    };
    let traces = p
        .seq(traces)
        .ok_or_else(|| "\"device_traces\" is not a list".to_string())?;
    let max = vramtrace_schema::reader::MAX_DEVICES as usize;
    let mut budget = expansion_budget(p.len);
    traces
        .iter()
        .enumerate()
        .map(|(device, &list)| {
            let entries = p
                .seq(list)
                .ok_or_else(|| format!("device_traces[{device}] is not a list"))?;
            if device >= max && !entries.is_empty() {
                return Err(format!(
                    "device_traces[{device}]: a device ordinal out of range (0 to {})",
                    max - 1
                ));
            }
            budget = budget.checked_sub(entries.len()).ok_or(EXPANDS)?;
            Ok(list)
        })
        .collect()
}

/// Frames from frame lists, their strings shared by the pickle's string objects.
#[derive(Default)]
pub struct FrameReader {
    strings: Map<usize, Arc<str>>,
    /// [`FrameReader::shared`]'s lists, by the pickle object they were read from.
    lists: Map<usize, Frames>,
}

impl FrameReader {
    fn shared_str(&mut self, p: &Pickle, v: Option<Value>) -> Arc<str> {
        let id = match v {
            Some(Value::Str(id)) => id,
            _ => usize::MAX,
        };
        self.strings
            .entry(id)
            .or_insert_with(|| Arc::from(v.and_then(|v| p.str(v)).unwrap_or("")))
            .clone()
    }

    /// The frames of list `v` (dicts of `filename`, `line`, `name`; anything else skipped).
    pub fn frames(&mut self, p: &Pickle, v: Option<Value>) -> Vec<Frame> {
        let Some(list) = v.and_then(|v| p.seq(v)) else {
            return Vec::new();
        };
        list.iter()
            .filter(|&&f| p.is_dict(f))
            .map(|&f| Frame {
                filename: self.shared_str(p, p.get(f, "filename")),
                line: p
                    .get(f, "line")
                    .and_then(|l| p.int(l))
                    .and_then(|l| i64::try_from(l).ok())
                    .unwrap_or(0),
                name: self.shared_str(p, p.get(f, "name")),
            })
            .collect()
    }

    /// [`FrameReader::frames`], read once per list object of the pickle and shared after.
    pub fn shared(&mut self, p: &Pickle, v: Option<Value>) -> Frames {
        let Some(Value::List(id) | Value::Tuple(id) | Value::Set(id)) = v else {
            return Frames::default();
        };
        if let Some(f) = self.lists.get(&id) {
            return f.clone();
        }
        let f: Frames = self.frames(p, v).into();
        self.lists.insert(id, f.clone());
        f
    }
}
