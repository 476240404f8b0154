//! The `events` table: a row per event, a file per process.
//!
//! The replay hands out the events of every process merged in run-time order, and a
//! Parquet file cannot be appended to once closed: a writer per process held open for
//! the whole replay would hold a row group of each of a thousand ranks in memory, and as
//! many descriptors. Rows are kept in small per-process buffers instead, appended as plain
//! fixed-size records to a spill file per process whenever [`BUFFERED_ROWS`] wait, and
//! each spill becomes that process's Parquet file once the replay has ended: memory stays
//! bounded whatever the number of processes and events.

use super::super::event_kind::EventKinds;
use super::Dataset;
use crate::model::Map;
use crate::replay::{Run, Step};
use arrow_array::builder::{
    Int32Builder, StringBuilder, StringDictionaryBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use vramtrace_schema::{Api, Kind, Op};

/// Rows waiting in memory, all processes together, before they are spilled (about 24 MB).
const BUFFERED_ROWS: usize = 1 << 18;
/// Rows per record batch written.
const BATCH_ROWS: usize = 1 << 16;

/// One event's row, as spilled: every field a fixed-width integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rec {
    /// The event's place in its process's replay: times may tie, this never does.
    seq: u64,
    time: u64,
    addr: u64,
    size: u64,
    requested: Option<u64>,
    handle: Option<u64>,
    stack: u64,
    /// This process's reserved bytes on the event's device after it, and its allocated
    /// layer there (allocated and requested bytes) where an allocator annotated it.
    reserved: u64,
    allocated: Option<(u64, u64)>,
    /// The whole GPU's reserved bytes after it, all processes of the run summed.
    gpu_reserved: u64,
    tid: u32,
    dev: i32,
    res: i32,
    api: u16,
    kind: u8,
}

const REC_BYTES: usize = 8 * 11 + 4 * 3 + 2 + 1 + 1;

impl Rec {
    fn put(&self, out: &mut Vec<u8>) {
        let flags = u8::from(self.requested.is_some())
            | u8::from(self.handle.is_some()) << 1
            | u8::from(self.allocated.is_some()) << 2;
        let (allocated, requested_live) = self.allocated.unwrap_or((0, 0));
        for v in [
            self.seq,
            self.time,
            self.addr,
            self.size,
            self.requested.unwrap_or(0),
            self.handle.unwrap_or(0),
            self.stack,
            self.reserved,
            allocated,
            requested_live,
            self.gpu_reserved,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&self.dev.to_le_bytes());
        out.extend_from_slice(&self.res.to_le_bytes());
        out.extend_from_slice(&self.api.to_le_bytes());
        out.push(self.kind);
        out.push(flags);
    }

    fn get(b: &[u8]) -> Rec {
        let u64_at =
            |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
        let flags = b[REC_BYTES - 1];
        let at = 8 * 11;
        Rec {
            seq: u64_at(0),
            time: u64_at(1),
            addr: u64_at(2),
            size: u64_at(3),
            requested: (flags & 1 != 0).then(|| u64_at(4)),
            handle: (flags & 2 != 0).then(|| u64_at(5)),
            stack: u64_at(6),
            reserved: u64_at(7),
            allocated: (flags & 4 != 0).then(|| (u64_at(8), u64_at(9))),
            gpu_reserved: u64_at(10),
            tid: u32_at(at),
            dev: u32_at(at + 4) as i32,
            res: u32_at(at + 8) as i32,
            api: u16::from_le_bytes([b[at + 12], b[at + 13]]),
            kind: b[at + 14],
        }
    }
}

/// Collects every event of a replay ([`EventSpill::step`]) and writes each process's
/// events file once it has ended ([`EventSpill::finish`]).
pub struct EventSpill {
    dir: tempfile::TempDir,
    kinds: EventKinds,
    /// Rows waiting, by process.
    waiting: Vec<Vec<Rec>>,
    buffered: usize,
    /// Rows spilled or waiting, by process.
    rows: Vec<u64>,
    /// The stacks each process's events name: the `stacks` table expands those only.
    stacks: Vec<rustc_hash::FxHashSet<u64>>,
    bytes: Vec<u8>,
}

impl EventSpill {
    /// A spill in a hidden directory of the dataset's own (removed when done), so that it
    /// lies on the disk that has room for the dataset.
    pub fn new(root: &std::path::Path) -> Result<EventSpill, String> {
        super::make_dirs(root, root)?;
        let dir = tempfile::Builder::new()
            .prefix(".vramtrace-spill-")
            .tempdir_in(root)
            .map_err(|e| format!("{}: cannot make a spill directory: {e}", root.display()))?;
        Ok(EventSpill {
            dir,
            kinds: EventKinds::default(),
            waiting: Vec::new(),
            buffered: 0,
            rows: Vec::new(),
            stacks: Vec::new(),
            bytes: Vec::new(),
        })
    }

    pub fn step(&mut self, s: &Step) -> std::io::Result<()> {
        // A row per event: a process's end is none.
        if s.ended {
            return Ok(());
        }
        let e = s.event;
        let kind = self.kinds.of(s.process, e);
        let allocated = s
            .model
            .layers
            .devices
            .get(&e.dev)
            .filter(|l| l.annotated)
            .map(|l| (l.allocated, l.requested));
        let p = s.process;
        if self.waiting.len() <= p {
            self.waiting.resize_with(p + 1, Vec::new);
            self.rows.resize(p + 1, 0);
            self.stacks.resize_with(p + 1, Default::default);
        }
        let rec = Rec {
            seq: self.rows[p],
            time: s.time,
            addr: e.addr,
            size: e.size,
            requested: e.requested,
            handle: e.handle,
            stack: e.stack,
            reserved: s.model.devices.get(&e.dev).map_or(0, |d| d.reserved),
            allocated,
            gpu_reserved: s
                .devices
                .lookup(s.process, e.dev)
                .map_or(0, |i| s.devices.devices[i].1.reserved),
            tid: e.tid,
            dev: e.dev,
            res: e.res,
            api: e.api as u16,
            kind: Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0) as u8,
        };
        if e.stack != 0 {
            self.stacks[p].insert(e.stack);
        }
        self.waiting[p].push(rec);
        self.rows[p] += 1;
        self.buffered += 1;
        if self.buffered >= BUFFERED_ROWS {
            self.spill_all()?;
        }
        Ok(())
    }

    fn spill_file(&self, process: usize) -> PathBuf {
        self.dir.path().join(format!("{process}.rows"))
    }

    fn spill_all(&mut self) -> std::io::Result<()> {
        for p in 0..self.waiting.len() {
            if self.waiting[p].is_empty() {
                continue;
            }
            self.bytes.clear();
            for r in &self.waiting[p] {
                r.put(&mut self.bytes);
            }
            self.waiting[p].clear();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.spill_file(p))?;
            f.write_all(&self.bytes)?;
        }
        self.buffered = 0;
        Ok(())
    }

    /// The stacks that process `p`'s events name, in order.
    pub fn stacks_of(&self, p: usize) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .stacks
            .get(p)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// Writes each process's events file (`name(p)` in its rank's partition); returns the
    /// rows written.
    pub fn finish(
        mut self,
        run: &Run,
        dataset: &Dataset,
        rank: impl Fn(usize) -> Option<String>,
        name: impl Fn(usize) -> String,
    ) -> Result<u64, String> {
        let dir = self.dir.path().to_path_buf();
        let spill_error =
            |e: std::io::Error| format!("{}: cannot spill events: {e}", dir.display());
        self.spill_all().map_err(&spill_error)?;
        let mut total = 0;
        for (p, model) in run.processes.iter().enumerate() {
            let path = dataset.process_file("events", rank(p).as_deref(), &name(p))?;
            let mut writer = dataset.writer(&path, schema())?;
            if self.rows.get(p).copied().unwrap_or(0) == 0 {
                // A file of no rows still: every process has its file in every table.
                writer.close().map_err(|e| super::parquet_error(&path, e))?;
                continue;
            }
            let mut file = std::fs::File::open(self.spill_file(p)).map_err(&spill_error)?;
            let mut chunk = vec![0u8; REC_BYTES * BATCH_ROWS];
            loop {
                let n = read_full(&mut file, &mut chunk).map_err(&spill_error)?;
                if n == 0 {
                    break;
                }
                let recs: Vec<Rec> = chunk[..n - n % REC_BYTES]
                    .chunks_exact(REC_BYTES)
                    .map(Rec::get)
                    .collect();
                total += recs.len() as u64;
                let batch = batch(&recs, &model.header.host, model.header.pid, &model.names)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                writer
                    .write(&batch)
                    .map_err(|e| super::parquet_error(&path, e))?;
            }
            writer.close().map_err(|e| super::parquet_error(&path, e))?;
        }
        Ok(total)
    }
}

/// Reads until `buf` is full or the file ends.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

pub fn schema() -> SchemaRef {
    let u64f = |name: &str, null: bool| Field::new(name, DataType::UInt64, null);
    let text = |name: &str, null: bool| {
        Field::new(
            name,
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            null,
        )
    };
    Arc::new(Schema::new(vec![
        u64f("seq", false),
        u64f("time_ns", false),
        text("host", false),
        Field::new("pid", DataType::UInt32, false),
        Field::new("tid", DataType::UInt32, false),
        Field::new("device", DataType::Int32, false),
        text("api", false),
        text("op", false),
        text("kind", false),
        text("layer", true),
        Field::new("result", DataType::Int32, false),
        u64f("address", false),
        u64f("size", false),
        u64f("requested_bytes", true),
        u64f("handle", true),
        u64f("stack_id", true),
        Field::new("marker", DataType::Utf8, true),
        u64f("process_reserved_bytes", false),
        u64f("process_allocated_bytes", true),
        u64f("process_requested_bytes", true),
        u64f("gpu_reserved_bytes", false),
    ]))
}

/// The layer an event's bytes count in: `reserved` (device memory from the driver),
/// `allocated` (an allocator's blocks inside it), `device` (NVML's figure); none for
/// calls that hold no device memory (host memory, address space, queries, markers).
pub fn layer(api: Api, kind: Kind) -> Option<&'static str> {
    match api.op() {
        Op::BlockAlloc | Op::BlockFree => Some("allocated"),
        Op::DeviceSample => Some("device"),
        _ if kind.is_device_memory() => Some("reserved"),
        _ => None,
    }
}

fn batch(
    recs: &[Rec],
    host: &str,
    pid: u32,
    names: &Map<u64, String>,
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let n = recs.len();
    let mut seq = UInt64Builder::with_capacity(n);
    let mut time = UInt64Builder::with_capacity(n);
    let mut hosts = StringDictionaryBuilder::<Int32Type>::new();
    let mut pids = UInt32Builder::with_capacity(n);
    let mut tid = UInt32Builder::with_capacity(n);
    let mut dev = Int32Builder::with_capacity(n);
    let mut api = StringDictionaryBuilder::<Int32Type>::new();
    let mut op = StringDictionaryBuilder::<Int32Type>::new();
    let mut kind = StringDictionaryBuilder::<Int32Type>::new();
    let mut layers = StringDictionaryBuilder::<Int32Type>::new();
    let mut res = Int32Builder::with_capacity(n);
    let mut addr = UInt64Builder::with_capacity(n);
    let mut size = UInt64Builder::with_capacity(n);
    let mut requested = UInt64Builder::with_capacity(n);
    let mut handle = UInt64Builder::with_capacity(n);
    let mut stack = UInt64Builder::with_capacity(n);
    let mut marker = StringBuilder::new();
    let mut reserved = UInt64Builder::with_capacity(n);
    let mut allocated = UInt64Builder::with_capacity(n);
    let mut requested_live = UInt64Builder::with_capacity(n);
    let mut gpu = UInt64Builder::with_capacity(n);
    for r in recs {
        let a = Api::ALL.get(r.api as usize).copied().unwrap_or(Api::ALL[0]);
        let k = Kind::ALL
            .get(r.kind as usize)
            .copied()
            .unwrap_or(Kind::Info);
        seq.append_value(r.seq);
        time.append_value(r.time);
        hosts.append_value(host);
        pids.append_value(pid);
        tid.append_value(r.tid);
        dev.append_value(r.dev);
        api.append_value(a.name());
        op.append_value(a.op().name());
        kind.append_value(k.name());
        layers.append_option(layer(a, k));
        res.append_value(r.res);
        addr.append_value(r.addr);
        size.append_value(r.size);
        requested.append_option(r.requested);
        handle.append_option(r.handle);
        stack.append_option((r.stack != 0).then_some(r.stack));
        let name = (a.op() == Op::Marker)
            .then(|| names.get(&r.handle.unwrap_or(0)))
            .flatten();
        marker.append_option(name);
        reserved.append_value(r.reserved);
        allocated.append_option(r.allocated.map(|a| a.0));
        requested_live.append_option(r.allocated.map(|a| a.1));
        gpu.append_value(r.gpu_reserved);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(seq.finish()),
        Arc::new(time.finish()),
        Arc::new(hosts.finish()),
        Arc::new(pids.finish()),
        Arc::new(tid.finish()),
        Arc::new(dev.finish()),
        Arc::new(api.finish()),
        Arc::new(op.finish()),
        Arc::new(kind.finish()),
        Arc::new(layers.finish()),
        Arc::new(res.finish()),
        Arc::new(addr.finish()),
        Arc::new(size.finish()),
        Arc::new(requested.finish()),
        Arc::new(handle.finish()),
        Arc::new(stack.finish()),
        Arc::new(marker.finish()),
        Arc::new(reserved.finish()),
        Arc::new(allocated.finish()),
        Arc::new(requested_live.finish()),
        Arc::new(gpu.finish()),
    ];
    RecordBatch::try_new(schema(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilled_records_read_back_as_written() {
        let mut draws = fastrand::Rng::with_seed(0x51ab_1e5e_ed00_0001);
        let mut next = |n: u64| draws.u64(..n);
        for _ in 0..10_000 {
            let opt = |v: u64, on: u64| (on == 1).then_some(v);
            let r = Rec {
                seq: next(u64::MAX),
                time: next(u64::MAX),
                addr: next(u64::MAX),
                size: next(u64::MAX),
                requested: opt(next(u64::MAX), next(2)),
                handle: opt(next(u64::MAX), next(2)),
                stack: next(u64::MAX),
                reserved: next(u64::MAX),
                allocated: opt(next(u64::MAX), next(2)).map(|a| (a, next(u64::MAX))),
                gpu_reserved: next(u64::MAX),
                tid: next(u32::MAX as u64) as u32,
                dev: next(u32::MAX as u64) as u32 as i32,
                res: next(u32::MAX as u64) as u32 as i32,
                api: next(Api::ALL.len() as u64) as u16,
                kind: next(Kind::ALL.len() as u64) as u8,
            };
            let mut bytes = Vec::new();
            r.put(&mut bytes);
            assert_eq!(bytes.len(), REC_BYTES);
            assert_eq!(Rec::get(&bytes), r);
        }
    }
}
