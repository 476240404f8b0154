//! A vramtrace trace as replay input: the requests an allocator reported through the
//! annotations of `vramtrace.h` (`vramtrace_block_alloc`: a block for a request of
//! `requested` bytes on a stream; `vramtrace_block_free`: the block came back), per
//! device, in order. What the annotations do not say, the replay cannot check: which
//! allocator made them and with which settings, where its segments lay, requests it
//! failed (it annotates no block then), and frees waiting for other streams. So the
//! requests are replayed through PyTorch's caching allocator on a card (never "as
//! recorded"), from an empty allocator (a trace starts with its process).

use super::device_layer::{Answers, Outside};
use super::input::{Event, History};
use crate::allocator::settings::Settings;
use crate::replay::{LoadOptions, Run};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::path::Path;
use vramtrace_schema::Op;

pub struct TraceInput {
    pub histories: Vec<History>,
    /// The device layer the same trace shows.
    pub layer: BTreeMap<i64, Outside>,
    /// Frees of blocks the trace never showed allocated, passed over.
    pub unknown_frees: usize,
    /// What reading met (a cut last line, an unreadable line: the requests before it
    /// are replayed), for stderr.
    pub problems: Vec<String>,
}

/// The annotated requests of the one process in `path`.
pub fn read(path: &Path) -> Result<TraceInput, String> {
    let name = path.display();
    let mut by_device: BTreeMap<i64, History> = BTreeMap::new();
    // Live blocks by (device, address): the bytes their request asked for.
    let mut live: FxHashMap<(i64, u64), u64> = FxHashMap::default();
    let mut answers = Answers::default();
    let mut unknown_frees = 0;
    let run = Run::load(&[path.to_path_buf()], LoadOptions::default(), |step| {
        answers.observe(step);
        let e = step.event;
        if step.ended || !e.ok() {
            return;
        }
        let dev = i64::from(e.dev);
        let h = || History {
            device: dev,
            settings: Settings::default(),
            ..Default::default()
        };
        match e.api.op() {
            Op::BlockAlloc => {
                let requested = e.requested.unwrap_or(e.size);
                live.insert((dev, e.addr), requested);
                let h = by_device.entry(dev).or_insert_with(h);
                let at = h.events.len();
                h.push(
                    Event::Alloc {
                        size: requested,
                        stream: e.stream.unwrap_or(0),
                        addr: e.addr,
                    },
                    at,
                );
            }
            Op::BlockFree => match live.remove(&(dev, e.addr)) {
                Some(size) => {
                    let h = by_device.entry(dev).or_insert_with(h);
                    let at = h.events.len();
                    h.push(Event::FreeRequested { addr: e.addr, size }, at);
                    h.push(Event::FreeCompleted { addr: e.addr, size }, at + 1);
                }
                None => unknown_frees += 1,
            },
            _ => {}
        }
    })?;
    if run.processes.is_empty() {
        return Err(run.problems().join("; "));
    }
    if run.processes.len() > 1 {
        return Err(format!(
            "{name}: the traces of {} processes: give one process's trace",
            run.processes.len()
        ));
    }
    if by_device.is_empty() {
        return Err(format!(
            "{name}: no allocator annotations (vramtrace_block_alloc): whatif replays the requests an allocator reports through vramtrace.h, or a PyTorch snapshot's history (`vramtrace run` writes one for Python programs)"
        ));
    }
    Ok(TraceInput {
        histories: by_device.into_values().collect(),
        layer: answers.devices,
        unknown_frees,
        problems: run.problems(),
    })
}
