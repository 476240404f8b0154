//! CSV: the timeline's buckets, and every event of a run as it streams by (`export`).

use super::escape::csv as field;
use crate::model::Map;
use crate::run::Step;
use crate::views::timeline::Timeline;
use std::fmt::Write as _;
use std::io::Write;
use vramtrace_schema::{Event, Kind, Op};

/// One row per series and bucket.
pub fn timeline(t: &Timeline) -> String {
    let mut o = String::from("time_s,scope,host,gpu,pid,rank,device,max_bytes,live_bytes,layer\n");
    for s in &t.series {
        for p in &s.points {
            let _ = writeln!(
                o,
                "{:.9},{},{},{},{},{},{},{},{},{}",
                p.time_ns as f64 / 1e9,
                s.scope,
                field(&s.host),
                field(&s.gpu),
                s.pid.map(|v| v.to_string()).unwrap_or_default(),
                s.rank.as_deref().map(field).unwrap_or_default(),
                s.device.map(|v| v.to_string()).unwrap_or_default(),
                p.max_bytes,
                p.live_bytes,
                s.layer
            );
        }
    }
    o
}

/// Writes every event as a row, with what the process and the whole GPU held after it.
pub struct EventCsv<W: Write> {
    out: W,
    /// Live allocations whose location made them host or managed pool memory, by process
    /// and address (handle for `cuMemCreate`): their frees carry no location, and their
    /// rows take the kind of what they give back from here.
    off_device: Map<(usize, u64), Kind>,
}

impl<W: Write> EventCsv<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(
            b"time_s,pid,tid,device,api,op,kind,result,addr,size,process_device_bytes,gpu_bytes\n",
        )?;
        Ok(EventCsv {
            out,
            off_device: Map::default(),
        })
    }

    /// The kind of memory the event deals in: a free's is its allocation's.
    fn kind(&mut self, process: usize, e: &Event) -> Kind {
        let key = |addr_or_handle: u64| (process, addr_or_handle);
        match e.api.op() {
            Op::Alloc if e.ok() && e.kind() != e.api.kind() => {
                self.off_device.insert(key(e.addr), e.kind());
            }
            Op::Create if e.ok() && e.kind() != e.api.kind() => {
                self.off_device.insert(key(e.handle.unwrap_or(0)), e.kind());
            }
            Op::Free if e.ok() => return self.off_device.remove(&key(e.addr)).unwrap_or(e.kind()),
            Op::Release if e.ok() => {
                let handle = e.handle.unwrap_or(0);
                return self.off_device.remove(&key(handle)).unwrap_or(e.kind());
            }
            _ => {}
        }
        e.kind()
    }

    pub fn step(&mut self, s: &Step) -> std::io::Result<()> {
        // A row per event: a process's end is none.
        if s.ended {
            return Ok(());
        }
        let e = s.event;
        let kind = self.kind(s.process, e);
        let process = s.model.devices.get(&e.dev).map_or(0, |d| d.reserved);
        let gpu = s
            .devices
            .lookup(s.process, e.dev)
            .map_or(0, |i| s.devices.devices[i].1.reserved);
        writeln!(
            self.out,
            "{:.9},{},{},{},{},{},{},{},{},{},{},{}",
            s.time as f64 / 1e9,
            s.model.header.pid,
            e.tid,
            e.dev,
            e.api.name(),
            e.api.op().name(),
            kind.name(),
            e.res,
            e.addr,
            e.size,
            process,
            gpu
        )
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
