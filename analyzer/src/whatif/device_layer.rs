//! The capacity a replay may reserve, from a `vramtrace run` trace: the card's memory less
//! what the device layer shows outside the allocator. Each answer the driver gave the
//! process (`cudaMemGetInfo`, `cuMemGetInfo`, and vramtrace's own question right after a
//! failed allocation) says what was used on the card (total less free); what the process's
//! traced allocations did not hold then was outside the allocator: the CUDA context,
//! libraries, other processes. The most seen at any answer is taken, so the capacity is
//! what the allocator could count on for the whole run.

use crate::replay::{LoadOptions, Run, Step};
use std::collections::BTreeMap;
use std::path::Path;
use vramtrace_schema::Op;

/// One device of the process, by its CUDA ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outside {
    /// The card's memory, as the driver gave it.
    pub total: u64,
    /// The most memory seen outside the process's traced allocations.
    pub outside: u64,
    /// Driver answers seen.
    pub answers: usize,
}

impl Outside {
    pub fn capacity(&self) -> u64 {
        self.total.saturating_sub(self.outside)
    }
}

/// Watches one process's driver answers, device by device.
#[derive(Debug, Default)]
pub struct Answers {
    pub devices: BTreeMap<i64, Outside>,
    totals: BTreeMap<i32, u64>,
}

impl Answers {
    /// A step of the process's trace.
    pub fn observe(&mut self, step: &Step) {
        let (e, m) = (step.event, step.model);
        if step.ended || e.api.op() != Op::Meminfo || !e.ok() {
            return;
        }
        // vramtrace's probe after a failure gives free bytes only: the card is the same.
        let Some(total) = e.total.or_else(|| self.totals.get(&e.dev).copied()) else {
            return;
        };
        self.totals.insert(e.dev, total);
        let Some(free) = e.free else {
            return;
        };
        let traced = m.devices.get(&e.dev).map_or(0, |d| d.reserved);
        let outside = total.saturating_sub(free).saturating_sub(traced);
        let o = self.devices.entry(i64::from(e.dev)).or_insert(Outside {
            total,
            outside: 0,
            answers: 0,
        });
        o.total = total;
        o.outside = o.outside.max(outside);
        o.answers += 1;
    }
}

/// Per device ordinal of process `pid` (of `host`, where the snapshot's name gives it),
/// from the traces in `dir`; empty where the directory has no trace of that process or it
/// never asked the driver.
pub fn outside(dir: &Path, host: Option<&str>, pid: u32) -> Result<BTreeMap<i64, Outside>, String> {
    let files = crate::input::trace_files(&[dir.to_path_buf()])?;
    // A directory of snapshots alone has no device layer.
    if files.iter().all(|f| crate::input::is_snapshot(f)) {
        return Ok(BTreeMap::new());
    }
    let mut answers = Answers::default();
    Run::load(&files, LoadOptions::default(), |step| {
        let h = &step.model.header;
        if h.pid == pid && host.is_none_or(|host| host == h.host) {
            answers.observe(step);
        }
    })?;
    Ok(answers.devices)
}
