//! CSV: the timeline's buckets, and every event of a run as it streams by (`export`).

use super::escape::csv as field;
use crate::run::Step;
use crate::views::timeline::Timeline;
use std::fmt::Write as _;
use std::io::Write;

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
}

impl<W: Write> EventCsv<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(
            b"time_s,pid,tid,device,api,op,kind,result,addr,size,process_device_bytes,gpu_bytes\n",
        )?;
        Ok(EventCsv { out })
    }

    pub fn step(&mut self, s: &Step) -> std::io::Result<()> {
        // A row per event: a process's end is none.
        if s.ended {
            return Ok(());
        }
        let e = s.event;
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
            e.kind().name(),
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
