//! From a decoded pickle to the snapshot model, for every generation of the format.

use super::history::{self, expansion_budget, FrameReader, EXPANDS};
use super::model::{Action, Block, BlockState, Frames, Generation, Segment, Snapshot, TraceEntry};
use super::pickle::{self, Pickle, Value};
use std::io::Read;
use std::path::Path;

/// The largest snapshot read (decompressed): the pickle is read as a stream and decodes
/// to about 1.4 times its size, so 2 GB is what a 24 GiB machine reads comfortably.
pub const MAX_SNAPSHOT_BYTES: u64 = 2 << 30;

/// Reads a snapshot file (a regular file of at most [`MAX_SNAPSHOT_BYTES`]). Errors name
/// the file and, for pickle errors, the byte offset and the opcode.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, String> {
    let p = read_pickle(path)?;
    model_of(&p, true).map_err(|e| format!("{}: {e}", path.display()))
}

/// [`read_snapshot`] without the frames of trace entries other than `oom` entries (blocks
/// and segments keep theirs), for figures and replays that need only sizes and addresses:
/// a million entries of 90 frames each are gigabytes as `Vec<Frame>`s.
pub fn read_snapshot_without_history_frames(path: &Path) -> Result<Snapshot, String> {
    let p = read_pickle(path)?;
    let mut r = reader(&p, true);
    r.history_frames = false;
    r.snapshot().map_err(|e| format!("{}: {e}", path.display()))
}

/// Decodes the pickle of snapshot file `path`, streamed (decompressed where gzip or
/// zstd). Errors name the file.
pub fn read_pickle(path: &Path) -> Result<Pickle, String> {
    let file =
        crate::regular_file::open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let content = vramtrace_schema::reader::compressed::decompressed(file)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    // One byte past the limit tells a file at the limit from a longer one.
    let mut content = content.take(MAX_SNAPSHOT_BYTES + 1);
    let p = pickle::parse_reader(&mut content).map_err(|e| {
        if content.limit() == 0 {
            too_long(path)
        } else {
            format!("{}: {e}", path.display())
        }
    })?;
    if p.len as u64 > MAX_SNAPSHOT_BYTES {
        return Err(too_long(path));
    }
    Ok(p)
}

fn too_long(path: &Path) -> String {
    format!(
        "{}: longer than {MAX_SNAPSHOT_BYTES} bytes, the most a file of this kind may be: not read",
        path.display()
    )
}

/// Reads a snapshot from the bytes of a pickle.
pub fn parse_snapshot(data: &[u8]) -> Result<Snapshot, String> {
    let p = pickle::parse(data).map_err(|e| e.to_string())?;
    model_of(&p, true)
}

/// The snapshot model of a decoded pickle; without `history`, the devices' trace entries
/// are left in the pickle (the views stream them: `events.rs`).
pub fn model_of(p: &Pickle, history: bool) -> Result<Snapshot, String> {
    reader(p, history).snapshot()
}

fn reader(p: &Pickle, history: bool) -> Reader<'_> {
    Reader {
        p,
        frames: FrameReader::default(),
        budget: expansion_budget(p.len),
        history,
        history_frames: true,
    }
}

struct Reader<'a> {
    p: &'a Pickle,
    frames: FrameReader,
    /// What is left of [`expansion_budget`].
    budget: usize,
    /// Whether to read the trace entries into the model, and their frames (`oom`
    /// entries' always).
    history: bool,
    history_frames: bool,
}

fn not_snapshot(what: String) -> String {
    format!("not a PyTorch memory snapshot: {what}")
}

impl Reader<'_> {
    /// Counts `n` values visited against the budget.
    fn spend(&mut self, n: usize) -> Result<(), String> {
        self.budget = self.budget.checked_sub(n).ok_or(EXPANDS)?;
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Snapshot, String> {
        let p = self.p;
        let root = p.root;
        let mut snap = Snapshot::default();
        let segments = if p.seq(root).is_some() {
            snap.generation = Generation::SegmentList;
            root
        } else if p.dict(root).is_some() {
            p.get(root, "segments")
                .ok_or_else(|| not_snapshot("a dict without \"segments\"".into()))?
        } else {
            return Err(not_snapshot("neither a dict nor a list of segments".into()));
        };
        let segments = p
            .seq(segments)
            .ok_or_else(|| not_snapshot("\"segments\" is not a list".into()))?;
        let mut history = false;
        for (i, &s) in segments.iter().enumerate() {
            self.spend(1).map_err(not_snapshot)?;
            let (device, seg, had_history) = self
                .segment(s)
                .map_err(|e| not_snapshot(format!("segment {i}: {e}")))?;
            history |= had_history;
            snap.device_mut(device).segments.push(seg);
        }
        if snap.generation != Generation::SegmentList {
            snap.generation = if history {
                Generation::History
            } else {
                Generation::Dict
            };
            let traces = history::device_traces(p).map_err(not_snapshot)?;
            if p.get(root, "device_traces").is_some() {
                snap.device_count = Some(traces.len());
            }
            for (device, list) in traces.into_iter().enumerate() {
                let entries = p.seq(list).unwrap_or_default();
                if entries.is_empty() {
                    continue;
                }
                if !self.history {
                    snap.device_mut(device as i64);
                    continue;
                }
                let mut out = Vec::with_capacity(entries.len());
                for (j, &e) in entries.iter().enumerate() {
                    self.spend(1).map_err(not_snapshot)?;
                    out.push(self.entry(e).map_err(|msg| {
                        not_snapshot(format!("device_traces[{device}][{j}]: {msg}"))
                    })?);
                }
                snap.device_mut(device as i64).trace = out;
            }
            if let Some(settings) = p.get(root, "allocator_settings") {
                if let Some(d) = p.dict(settings) {
                    let mut out = serde_json::Map::new();
                    for &(k, v) in d.iter() {
                        let key = self.text(k).map_err(not_snapshot)?;
                        let value = to_json(p, v, 0, &mut self.budget).map_err(not_snapshot)?;
                        out.insert(key, value);
                    }
                    snap.allocator_settings = Some(out);
                }
            }
        }
        if snap.generation != Generation::SegmentList {
            self.host_and_flags(&mut snap);
        }
        for d in &mut snap.devices {
            d.segments.sort_by_key(|s| s.address);
        }
        Ok(snap)
    }

    fn u64_of(&self, d: Value, key: &str) -> Result<Option<u64>, String> {
        history::u64_of(self.p, d, key)
    }

    fn need_u64(&self, d: Value, key: &str) -> Result<u64, String> {
        self.u64_of(d, key)?.ok_or_else(|| format!("no \"{key}\""))
    }

    fn segment(&mut self, s: Value) -> Result<(i64, Segment, bool), String> {
        let p = self.p;
        if !p.is_dict(s) {
            return Err("not a dict".into());
        }
        let device = p.get(s, "device").and_then(|v| p.int(v)).unwrap_or(0);
        // The export lays devices out by ordinal: an absurd one must not size it.
        let max = vramtrace_schema::reader::MAX_DEVICES;
        if !(0..max as i128).contains(&device) {
            return Err(format!(
                "\"device\" = {device} is out of range (0 to {})",
                max - 1
            ));
        }
        let device = device as i64;
        let address = self.need_u64(s, "address")?;
        let total_size = self.need_u64(s, "total_size")?;
        let segment_type = p
            .get(s, "segment_type")
            .and_then(|v| p.str(v))
            .unwrap_or("large");
        self.spend(segment_type.len())?;
        let mut seg = Segment {
            address,
            total_size,
            stream: self.u64_of(s, "stream")?.unwrap_or(0),
            segment_type: segment_type.to_string(),
            is_expandable: matches!(p.get(s, "is_expandable"), Some(Value::Bool(true))),
            segment_pool_id: self.pool_id(s),
            frames: self.frames(p.get(s, "frames"))?,
            blocks: Vec::new(),
        };
        let mut history = false;
        let mut next = address;
        if let Some(blocks) = p.get(s, "blocks") {
            let blocks = p.seq(blocks).ok_or("\"blocks\" is not a list")?;
            for (j, &b) in blocks.iter().enumerate() {
                self.spend(1)?;
                let (block, had_history) =
                    self.block(b, next).map_err(|e| format!("block {j}: {e}"))?;
                history |= had_history;
                next = block.address.saturating_add(block.size);
                seg.blocks.push(block);
            }
        }
        Ok((device, seg, history))
    }

    fn block(&mut self, b: Value, next: u64) -> Result<(Block, bool), String> {
        let p = self.p;
        if !p.is_dict(b) {
            return Err("not a dict".into());
        }
        let size = self.need_u64(b, "size")?;
        let state_v = p.get(b, "state").ok_or("no \"state\"")?;
        let state_s = p.str(state_v).ok_or("\"state\" is not a string")?;
        let state =
            BlockState::parse(state_s).ok_or_else(|| format!("unknown state {state_s:?}"))?;
        // 2.0: `history: [{addr, real_size, frames}]`, the last entry being the current use.
        let last = p
            .get(b, "history")
            .and_then(|h| p.seq(h))
            .and_then(|h| h.last().copied());
        let had_history = p.get(b, "history").is_some();
        let requested_size = match self.u64_of(b, "requested_size")? {
            Some(r) => Some(r),
            None => match last {
                Some(h) if state != BlockState::Inactive => self.u64_of(h, "real_size")?,
                _ => None,
            },
        };
        let frames = match (p.get(b, "frames"), last) {
            (Some(f), _) => self.frames(Some(f))?,
            (None, Some(h)) if state != BlockState::Inactive => self.frames(p.get(h, "frames"))?,
            _ => Frames::default(),
        };
        Ok((
            Block {
                address: self.u64_of(b, "address")?.unwrap_or(next),
                size,
                requested_size,
                state,
                frames,
            },
            had_history,
        ))
    }

    fn entry(&mut self, e: Value) -> Result<TraceEntry, String> {
        let h = history::entry(self.p, e)?;
        let frames = match self.history_frames || h.action == Action::Oom {
            true => self.frames(h.frames)?,
            false => Frames::default(),
        };
        Ok(TraceEntry {
            action: h.action,
            addr: h.addr,
            size: h.size,
            stream: h.stream,
            time_us: h.time_us,
            device_free: h.device_free,
            frames,
            extra: self.extra(e)?,
        })
    }

    /// `segment_pool_id`: a pair of integers.
    fn pool_id(&self, s: Value) -> Option<(i64, i64)> {
        let p = self.p;
        let pair = p.seq(p.get(s, "segment_pool_id")?)?;
        let [a, b] = pair else { return None };
        let int = |v: Value| p.int(v).and_then(|i| i64::try_from(i).ok());
        Some((int(*a)?, int(*b)?))
    }

    /// The keys of entry `e` that [`history::entry`] does not read, as JSON.
    fn extra(&mut self, e: Value) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        let p = self.p;
        let mut out = serde_json::Map::new();
        // A compact entry keeps its other keys in `rest`, nearly always absent, and the
        // strings of newer files in slots: rebuilding the whole dict for each of millions
        // of entries of an older file found nothing.
        let pairs = match p.entry(e) {
            Some(c) if c.has_strings() => p.dict(e),
            Some(c) => match c.rest() {
                Some(rest) => p.dict(Value::Dict(rest)),
                None => return Ok(out),
            },
            None => p.dict(e),
        };
        for &(k, v) in pairs.unwrap_or_default().iter() {
            if p.str(k).is_some_and(|k| history::KNOWN_KEYS.contains(&k)) {
                continue;
            }
            let key = self.text(k)?;
            let value = to_json(p, v, 0, &mut self.budget)?;
            out.insert(key, value);
        }
        Ok(out)
    }

    /// `host_segments` and `host_traces` (pinned host memory), and the flags that say the
    /// history was cut. Host memory in a shape this reader does not know is left out
    /// rather than refusing the file: the device's memory is what the views are for.
    fn host_and_flags(&mut self, snap: &mut Snapshot) {
        let p = self.p;
        let root = p.root;
        if let Some(list) = p.get(root, "host_segments").and_then(|v| p.seq(v)) {
            for &s in list {
                if let Ok((_, seg, _)) = self.segment(s) {
                    snap.host_segments.push(seg);
                }
            }
        }
        if let Some(list) = p.get(root, "host_traces").and_then(|v| p.seq(v)) {
            // One list of entries, or one per device.
            let mut entries: Vec<Value> = Vec::new();
            for &v in list {
                match p.seq(v) {
                    Some(inner) => entries.extend_from_slice(inner),
                    None => entries.push(v),
                }
            }
            for e in entries {
                if self.spend(1).is_err() {
                    break;
                }
                if let Ok(entry) = self.entry(e) {
                    snap.host_traces.push(entry);
                }
            }
        }
        for (k, v) in p.dict(root).unwrap_or_default().iter() {
            let Some(key) = p.str(*k) else { continue };
            if key.contains("truncated") && truthy(p, *v) {
                snap.history_truncated.push(key.to_string());
            }
        }
    }

    /// The frames of list `v`, counted against the budget at each reference (the views
    /// walk a block's frames however many blocks share them).
    fn frames(&mut self, v: Option<Value>) -> Result<Frames, String> {
        if let Some(list) = v.and_then(|v| self.p.seq(v)) {
            self.spend(list.len())?;
        }
        Ok(self.frames.shared(self.p, v))
    }

    /// A dict key as text: strings bare, the rest as JSON.
    fn text(&mut self, v: Value) -> Result<String, String> {
        Ok(match v {
            Value::Str(_) => {
                let s = self.p.str(v).unwrap_or_default();
                self.spend(s.len())?;
                s.to_string()
            }
            _ => to_json(self.p, v, 0, &mut self.budget)?.to_string(),
        })
    }
}

/// A flag that is set: true, a non-zero number, or a list holding one (a flag per device).
fn truthy(p: &Pickle, v: Value) -> bool {
    match v {
        Value::Bool(b) => b,
        Value::Int(i) => i != 0,
        _ => p
            .seq(v)
            .is_some_and(|s| s.iter().any(|&x| matches!(x, Value::Bool(true)))),
    }
}

/// A plain-data value as JSON (dict keys as text; bytes and deep nesting as null), each
/// value and byte of text counted against `budget`.
fn to_json(
    p: &Pickle,
    v: Value,
    depth: usize,
    budget: &mut usize,
) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if depth > 16 {
        return Ok(J::Null);
    }
    let text = p.str(v).map_or(0, str::len);
    *budget = budget.checked_sub(1 + text).ok_or(EXPANDS)?;
    Ok(match v {
        Value::None | Value::Bytes(_) => J::Null,
        Value::Bool(b) => J::Bool(b),
        Value::Int(i) => J::from(i),
        Value::BigInt(_) => J::String(p.int(v).unwrap_or_default().to_string()),
        Value::Float(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        Value::Str(_) => J::String(p.str(v).unwrap_or_default().to_string()),
        Value::List(_) | Value::Tuple(_) | Value::Set(_) => J::Array(
            p.seq(v)
                .unwrap_or_default()
                .iter()
                .map(|&x| to_json(p, x, depth + 1, budget))
                .collect::<Result<_, _>>()?,
        ),
        Value::Dict(_) => {
            let mut out = serde_json::Map::new();
            for &(k, x) in p.dict(v).unwrap_or_default().iter() {
                let key = match k {
                    Value::Str(_) => p.str(k).unwrap_or_default().to_string(),
                    _ => to_json(p, k, depth + 1, budget)?.to_string(),
                };
                out.insert(key, to_json(p, x, depth + 1, budget)?);
            }
            J::Object(out)
        }
    })
}
