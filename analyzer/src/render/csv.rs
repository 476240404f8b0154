//! CSV: the timeline's buckets, and every event of a run as it streams by (`export`).

use super::escape::csv as field;
use super::event_kind::EventKinds;
use crate::replay::Step;
use crate::views::timeline::Timeline;
use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use vramtrace_schema::{Api, Kind};

/// One row per series and bucket.
pub fn timeline(t: &Timeline) -> String {
    let mut o: Vec<u8> =
        b"time_s,scope,host,gpu,pid,rank,device,max_bytes,live_bytes,layer\n".to_vec();
    let mut number = itoa::Buffer::new();
    for s in &t.series {
        // What every row of the series repeats, escaped once for them all.
        let series = format!(
            ",{},{},{},{},{},{},",
            s.scope,
            field(&s.host),
            field(&s.gpu),
            s.pid.map(|v| v.to_string()).unwrap_or_default(),
            s.rank.as_deref().map(field).unwrap_or_default(),
            s.device.map(|v| v.to_string()).unwrap_or_default(),
        );
        for p in &s.points {
            seconds(&mut o, p.time_ns);
            o.extend_from_slice(series.as_bytes());
            o.extend_from_slice(number.format(p.max_bytes).as_bytes());
            o.push(b',');
            o.extend_from_slice(number.format(p.live_bytes).as_bytes());
            o.push(b',');
            o.extend_from_slice(s.layer.as_bytes());
            o.push(b'\n');
        }
    }
    // Only ASCII digits and punctuation were added to the escaped (UTF-8) fields.
    String::from_utf8(o).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Bytes of rows formatted before they are written.
const ROWS_BUFFERED: usize = 1 << 20;
/// Rows handed to the writing thread at a time.
const BATCH: usize = 8192;
/// Batches that may wait for the writing thread.
const AHEAD: usize = 4;

/// What a row says, taken from the replay: formatted on a thread of its own.
#[derive(Clone, Copy)]
struct Row {
    time: u64,
    addr: u64,
    size: u64,
    /// What the process, and the whole GPU, held after the event (reserved layer).
    process: u64,
    gpu: u64,
    pid: u32,
    tid: u32,
    dev: i32,
    res: i32,
    api: Api,
    kind: Kind,
}

/// Writes every event as a row, with what the process and the whole GPU held after it.
///
/// Formatting millions of rows costs about what replaying their events does, and the
/// replay runs on one thread: the rows are formatted and written on another, which
/// takes them in batches of plain records.
pub struct EventCsv<W: Write + Send + 'static> {
    kinds: EventKinds,
    batch: Vec<Row>,
    writer: Writer<W>,
}

enum Writer<W: Write + Send + 'static> {
    Thread {
        full: SyncSender<Vec<Row>>,
        /// Batches written, to be filled again.
        empty: Receiver<Vec<Row>>,
        thread: JoinHandle<std::io::Result<()>>,
    },
    /// No thread could be started: rows are formatted here.
    Inline(RowWriter<W>),
    /// The thread is joined, or the rows written: by `finish`, or after the thread's error
    /// was returned.
    Done,
}

impl<W: Write + Send + 'static> EventCsv<W> {
    pub fn new(out: W) -> std::io::Result<Self> {
        let rows = RowWriter::new(out)?;
        let (full, take) = sync_channel::<Vec<Row>>(AHEAD);
        let (give_back, empty) = sync_channel::<Vec<Row>>(AHEAD + 2);
        // The writer comes through a channel so that it stays here if no thread starts.
        let (lend, borrow) = sync_channel::<RowWriter<W>>(1);
        let started = std::thread::Builder::new()
            .name("csv-rows".into())
            .spawn(move || {
                let Ok(mut rows) = borrow.recv() else {
                    return Ok(());
                };
                for mut batch in take {
                    for row in &batch {
                        rows.row(row)?;
                    }
                    batch.clear();
                    // Kept for reuse only while the replay wants it.
                    let _ = give_back.try_send(batch);
                }
                rows.finish()
            });
        let writer = match started {
            Ok(thread) => match lend.send(rows) {
                Ok(()) => Writer::Thread {
                    full,
                    empty,
                    thread,
                },
                Err(back) => Writer::Inline(back.0),
            },
            Err(_) => Writer::Inline(rows),
        };
        Ok(EventCsv {
            kinds: EventKinds::default(),
            batch: Vec::with_capacity(BATCH),
            writer,
        })
    }
    pub fn step(&mut self, s: &Step) -> std::io::Result<()> {
        // A row per event: a process's end is none.
        if s.ended {
            return Ok(());
        }
        let e = s.event;
        let kind = self.kinds.of(s.process, e);
        self.batch.push(Row {
            time: s.time,
            addr: e.addr,
            size: e.size,
            process: s.model.devices.get(&e.dev).map_or(0, |d| d.reserved),
            gpu: s
                .devices
                .lookup(s.process, e.dev)
                .map_or(0, |i| s.devices.devices[i].1.reserved),
            pid: s.model.header.pid,
            tid: e.tid,
            dev: e.dev,
            res: e.res,
            api: e.api,
            kind,
        });
        if self.batch.len() >= BATCH {
            self.hand_over()?;
        }
        Ok(())
    }

    /// The batch to the writer.
    fn hand_over(&mut self) -> std::io::Result<()> {
        match &mut self.writer {
            Writer::Thread { full, empty, .. } => {
                let next = empty
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BATCH));
                let batch = std::mem::replace(&mut self.batch, next);
                if full.send(batch).is_err() {
                    // The writer stopped on an error: it is the one to return.
                    return Err(self
                        .join()
                        .err()
                        .unwrap_or_else(|| std::io::Error::other("the CSV writer stopped")));
                }
            }
            Writer::Inline(rows) => {
                for row in &self.batch {
                    rows.row(row)?;
                }
                self.batch.clear();
            }
            Writer::Done => {
                if !self.batch.is_empty() {
                    return Err(std::io::Error::other("rows after the CSV writer stopped"));
                }
            }
        }
        Ok(())
    }

    /// Waits for the writing thread; its result.
    fn join(&mut self) -> std::io::Result<()> {
        match std::mem::replace(&mut self.writer, Writer::Done) {
            Writer::Thread { full, thread, .. } => {
                // Without a sender the thread ends once it has written every batch.
                drop(full);
                thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            }
            Writer::Inline(rows) => rows.finish(),
            Writer::Done => Ok(()),
        }
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.hand_over()?;
        self.join()
    }
}

/// A view that stops early (no readable input) drops the export unfinished: the header
/// is still written, as a buffered writer dropped writes it, and the thread is over
/// before the process exits.
impl<W: Write + Send + 'static> Drop for EventCsv<W> {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// Formats rows into a buffer of its own, written [`ROWS_BUFFERED`] bytes at a time: each
/// is built in place there, not copied again into a buffered writer.
struct RowWriter<W: Write> {
    out: W,
    rows: Vec<u8>,
    /// The fields from `pid` to `result` of recent rows, as written: a row nearly always
    /// repeats those of one of the last few (a process, thread and device, a few APIs).
    middles: Vec<(Middle, Vec<u8>)>,
    /// The one to replace next once [`MIDDLES`] are kept.
    oldest: usize,
}

const MIDDLES: usize = 16;

type Middle = (u32, u32, i32, Api, Kind, i32);

impl<W: Write> RowWriter<W> {
    fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(
            b"time_s,pid,tid,device,api,op,kind,result,addr,size,process_device_bytes,gpu_bytes\n",
        )?;
        Ok(RowWriter {
            out,
            rows: Vec::with_capacity(ROWS_BUFFERED + 512),
            middles: Vec::with_capacity(MIDDLES),
            oldest: 0,
        })
    }

    fn row(&mut self, r: &Row) -> std::io::Result<()> {
        // One row for each of millions of events: built in place with itoa, where
        // `write!`'s formatting machinery took most of the export's own time.
        let row = &mut self.rows;
        seconds(row, r.time);
        let mut number = itoa::Buffer::new();
        let field = |row: &mut Vec<u8>, text: &[u8]| {
            row.push(b',');
            row.extend_from_slice(text);
        };
        let key = (r.pid, r.tid, r.dev, r.api, r.kind, r.res);
        match self.middles.iter().find(|m| m.0 == key) {
            Some((_, text)) => row.extend_from_slice(text),
            None => {
                // The oldest kept, buffer and all, once as many are kept as may be.
                let slot = if self.middles.len() < MIDDLES {
                    self.middles.push((key, Vec::new()));
                    self.middles.len() - 1
                } else {
                    let slot = self.oldest;
                    self.oldest = (slot + 1) % MIDDLES;
                    slot
                };
                let (kept, text) = &mut self.middles[slot];
                *kept = key;
                text.clear();
                field(text, number.format(r.pid).as_bytes());
                field(text, number.format(r.tid).as_bytes());
                field(text, number.format(r.dev).as_bytes());
                field(text, r.api.name().as_bytes());
                field(text, r.api.op().name().as_bytes());
                field(text, r.kind.name().as_bytes());
                field(text, number.format(r.res).as_bytes());
                row.extend_from_slice(text);
            }
        }
        field(row, number.format(r.addr).as_bytes());
        field(row, number.format(r.size).as_bytes());
        let process = number.format(r.process).as_bytes();
        field(row, process);
        // One process: the GPU's figure is the process's, digits and all.
        if r.gpu == r.process {
            let at = row.len() - process.len() - 1;
            row.extend_from_within(at..);
        } else {
            field(row, number.format(r.gpu).as_bytes());
        }
        row.push(b'\n');
        if row.len() >= ROWS_BUFFERED {
            self.out.write_all(row)?;
            row.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<()> {
        self.out.write_all(&self.rows)?;
        self.out.flush()
    }
}

/// Run time `ns` in seconds with nine decimals, exactly as `{:.9}` writes `ns as f64 /
/// 1e9`. Below 2^23 s (97 days) that float lies within 2^-31 s of the exact figure, less
/// than half a nanosecond, so its nine decimals are the integer's own digits; past it,
/// the float's rounding shows, and it is formatted as a float.
fn seconds(out: &mut Vec<u8>, ns: u64) {
    const NS: u64 = 1_000_000_000;
    const EXACT_BELOW: u64 = (1 << 23) * NS;
    if ns >= EXACT_BELOW {
        let _ = write!(out, "{:.9}", ns as f64 / 1e9);
        return;
    }
    out.extend_from_slice(itoa::Buffer::new().format(ns / NS).as_bytes());
    out.push(b'.');
    let mut fraction = ns % NS;
    let mut digits = [b'0'; 9];
    for d in digits.iter_mut().rev() {
        *d = b'0' + (fraction % 10) as u8;
        fraction /= 10;
    }
    out.extend_from_slice(&digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_as_their_fields_whatever_repeats() {
        // More distinct (pid, tid, device, API, kind, result) than are kept, in runs and
        // alternating; the GPU's figure the process's or not.
        let mut draws = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let mut next = |n: u64| draws.u64(..n);
        let mut writer = RowWriter::new(Vec::new()).unwrap();
        let mut expected =
            "time_s,pid,tid,device,api,op,kind,result,addr,size,process_device_bytes,gpu_bytes\n"
                .to_string();
        let mut key = [0; 6];
        for _ in 0..20_000 {
            if next(4) == 0 {
                key = [next(3), next(4), next(2), next(4), next(3), next(3)];
            }
            let process = next(1 << 40) + 1;
            let r = Row {
                time: next(1 << 50),
                addr: next(u64::MAX),
                size: next(1 << 34),
                process,
                gpu: [process, process + 1, process - 1, next(1 << 40)][next(4) as usize],
                pid: 100 + key[0] as u32,
                tid: key[1] as u32,
                dev: key[2] as i32 - 1,
                api: Api::ALL[key[3] as usize],
                kind: Kind::ALL[key[4] as usize],
                res: key[5] as i32 * 100,
            };
            writer.row(&r).unwrap();
            expected += &format!(
                "{:.9},{},{},{},{},{},{},{},{},{},{},{}\n",
                r.time as f64 / 1e9,
                r.pid,
                r.tid,
                r.dev,
                r.api.name(),
                r.api.op().name(),
                r.kind.name(),
                r.res,
                r.addr,
                r.size,
                r.process,
                r.gpu
            );
        }
        let RowWriter { mut out, rows, .. } = writer;
        out.extend_from_slice(&rows);
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn seconds_are_written_as_the_float_formatting_writes_them() {
        let float = |ns: u64| format!("{:.9}", ns as f64 / 1e9);
        let mut checked = vec![0, 1, 999_999_999, 1_000_000_000, 1_044_029_979_000];
        let edge = (1u64 << 23) * 1_000_000_000;
        checked.extend((edge - 2_000..edge + 2_000).step_by(7));
        checked.extend([u64::MAX, 1 << 53, (1 << 53) + 1, 1_700_000_000_123_456_789]);
        // A spread over every magnitude, from a fixed-seed generator.
        let mut draws = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: u64| draws.u64(..n);
        for _ in 0..200_000 {
            checked.push(next(u64::MAX) >> next(64));
        }
        for ns in checked {
            let mut out = Vec::new();
            seconds(&mut out, ns);
            assert_eq!(String::from_utf8(out).unwrap(), float(ns), "{ns} ns");
        }
    }
}
