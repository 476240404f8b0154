//! Chrome trace JSON (opens in ui.perfetto.dev and chrome://tracing), written as the
//! replay streams by: a counter track per process and device, one per GPU for the whole
//! run (pid 0, "all processes"), and an instant event for each failed allocation.

use crate::errors;
use crate::replay::{Run, Step};
use crate::units;
use serde_json::json;
use std::io::Write;
use vramtrace_schema::Op;

pub struct PerfettoWriter<W: Write> {
    out: W,
    first: bool,
    named: Vec<bool>,
    gpus_named: Vec<bool>,
}

/// Microseconds, as the format wants.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl<W: Write> PerfettoWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(PerfettoWriter {
            out,
            first: true,
            named: Vec::new(),
            gpus_named: Vec::new(),
        })
    }

    fn event(&mut self, v: serde_json::Value) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        let text = serde_json::to_string(&v).map_err(std::io::Error::other)?;
        self.out.write_all(super::escape::json(&text).as_bytes())
    }

    pub fn step(&mut self, s: &Step) -> std::io::Result<()> {
        let pid = s.model.header.pid;
        if self.named.len() <= s.process {
            self.named.resize(s.process + 1, false);
        }
        if !self.named[s.process] {
            self.named[s.process] = true;
            let rank = s
                .model
                .rank()
                .map(|r| format!(" rank {r}"))
                .unwrap_or_default();
            self.event(json!({"ph": "M", "name": "process_name", "pid": pid,
                "args": {"name": format!("{}{rank}: {}", pid, s.model.header.argv.join(" "))}}))?;
        }
        let e = s.event;
        let mut last_dev = None;
        for c in s.changes {
            if last_dev == Some(c.dev) {
                continue;
            }
            last_dev = Some(c.dev);
            // An ended process's own counter stays where it was; the GPU's drops.
            if !s.ended {
                let bytes = s.model.devices.get(&c.dev).map_or(0, |d| d.reserved);
                self.event(
                    json!({"ph": "C", "name": format!("device {} reserved", c.dev), "pid": pid,
                    "ts": us(s.time), "args": {"bytes": bytes}}),
                )?;
            }
            if let Some(i) = s.devices.lookup(s.process, c.dev) {
                if self.gpus_named.is_empty() {
                    self.event(json!({"ph": "M", "name": "process_name", "pid": 0,
                        "args": {"name": "all processes"}}))?;
                }
                if self.gpus_named.len() <= i {
                    self.gpus_named.resize(i + 1, true);
                }
                let (id, usage) = &s.devices.devices[i];
                self.event(
                    json!({"ph": "C", "name": format!("{} GPU {} reserved", id.host, id.gpu),
                    "pid": 0, "ts": us(s.time), "args": {"bytes": usage.reserved}}),
                )?;
            }
        }
        // The layers around reserved: a counter per layer the trace has.
        if let Some(layer) = s.model.layers.devices.get(&e.dev) {
            let annotated = matches!(e.api.op(), Op::BlockAlloc | Op::BlockFree);
            if layer.annotated && (annotated || !s.changes.is_empty()) {
                let reserved = s.model.devices.get(&e.dev).map_or(0, |d| d.reserved);
                self.event(
                    json!({"ph": "C", "name": format!("device {} allocated", e.dev), "pid": pid,
                    "ts": us(s.time), "args": {"bytes": layer.allocated,
                    "cached_free": reserved.saturating_sub(layer.allocated)}}),
                )?;
            }
            if e.api.op() == Op::DeviceSample && e.ok() {
                self.event(
                    json!({"ph": "C", "name": format!("device {} (NVML)", e.dev), "pid": pid,
                    "ts": us(s.time), "args": {"bytes": e.size}}),
                )?;
            }
        }
        if matches!(e.api.op(), Op::Alloc | Op::Create) && !e.ok() && !s.ended {
            let held = s.model.devices.get(&e.dev).map_or(0, |d| d.reserved);
            let mut failed = json!({"ph": "i", "s": "p", "pid": pid, "tid": e.tid, "ts": us(s.time),
                "name": format!("{} of {} failed", e.api.name(), units::bytes(e.size)),
                "args": {"requested_bytes": e.size, "device": e.dev, "result": errors::name(e.api, e.res),
                         "reserved_bytes": held}});
            // Host or managed pool memory: where it was asked for, as `oom` says.
            if let Some(l) = e.loc.off_device(e.kind()) {
                failed["args"]["location"] = l.name().into();
            }
            self.event(failed)?;
        }
        Ok(())
    }

    pub fn finish(mut self, run: &Run) -> std::io::Result<()> {
        let meta = json!({"start_unix_ns": run.start_unix_ns, "processes": run.processes.len()});
        self.out.write_all(b"\n],\"metadata\":")?;
        serde_json::to_writer(&mut self.out, &meta).map_err(std::io::Error::other)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()
    }
}
