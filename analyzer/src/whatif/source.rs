//! What `vramtrace whatif` replays: a PyTorch snapshot, a `vramtrace run` directory (the
//! hook's snapshot of one process, with the settings and the device layer its files
//! show), or a trace whose allocator annotated its blocks.

use super::device_layer::{outside, Outside};
use super::from_snapshot::{histories, infer_expandable};
use super::{from_trace, run_dir, History, Settings};
use crate::snapshot::read::read_snapshot_without_history_frames;
use crate::snapshot::{read_snapshot, DeviceSnapshot, Snapshot};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub struct Source {
    pub name: String,
    /// The snapshot (for a trace, one with its devices and nothing else): the replayed
    /// entries written with `-o` take their frames and times from its entries.
    pub snap: Snapshot,
    /// The recorded run's settings, or PyTorch's defaults for a trace.
    pub recorded: Settings,
    /// Whether the recording is PyTorch's, so that a replay can be checked against it.
    pub checkable: bool,
    pub histories: Vec<History>,
    pub layer: BTreeMap<i64, Outside>,
    /// What reading met, for stderr.
    pub problems: Vec<String>,
}

/// `frames`: keep the history's frames (only `-o` writes them; a history of millions of
/// entries takes gigabytes with them).
pub fn open(path: &Path, frames: bool) -> Result<Source, String> {
    if path.is_dir() {
        if let Some(run) = run_dir::resolve(path)? {
            let layer = outside(path, run.host.as_deref(), run.pid)?;
            return snapshot(&run.snapshot, run.alloc_conf, layer, frames);
        }
        // No hook snapshot: the one trace of an annotating allocator's process, if that.
        let traces: Vec<PathBuf> = crate::input::trace_files(&[path.to_path_buf()])?
            .into_iter()
            .filter(|f| !crate::input::is_snapshot(f))
            .collect();
        return match &traces[..] {
            [one] => trace(one),
            _ => Err(format!(
                "{}: no torch-snapshot-HOST-PID.pickle (the PyTorch hook of `vramtrace run` writes one), and {} traces: give the one whose allocator annotated its blocks",
                path.display(),
                traces.len()
            )),
        };
    }
    if crate::input::is_snapshot(path) {
        return snapshot(path, None, BTreeMap::new(), frames);
    }
    trace(path)
}

/// A trace whose allocator annotated its blocks (vramtrace.h).
fn trace(path: &Path) -> Result<Source, String> {
    let t = from_trace::read(path)?;
    let mut snap = Snapshot::default();
    for h in &t.histories {
        snap.devices.push(DeviceSnapshot {
            device: h.device,
            ..Default::default()
        });
    }
    let mut problems = t.problems;
    if t.unknown_frees > 0 {
        problems.push(format!(
            "note: {}: {} block frees of blocks never annotated as allocated are passed over",
            path.display(),
            t.unknown_frees
        ));
    }
    Ok(Source {
        name: path.display().to_string(),
        snap,
        recorded: Settings::default(),
        checkable: false,
        histories: t.histories,
        layer: t.layer,
        problems,
    })
}

/// `alloc_conf`: the allocator settings the hook saved (for snapshots before 2.4).
fn snapshot(
    path: &Path,
    alloc_conf: Option<String>,
    layer: BTreeMap<i64, Outside>,
    frames: bool,
) -> Result<Source, String> {
    let snap = if frames {
        read_snapshot(path)?
    } else {
        read_snapshot_without_history_frames(path)?
    };
    let name = path.display().to_string();
    let mut recorded = Settings::from_recorded(snap.allocator_settings.as_ref())
        .map_err(|e| format!("{name}: {e}"))?;
    if let (None, Some(conf)) = (&snap.allocator_settings, &alloc_conf) {
        recorded
            .set(conf)
            .map_err(|e| format!("{name}: PYTORCH_ALLOC_CONF: {e}"))?;
    }
    infer_expandable(&snap, &mut recorded);
    let hs = histories(&snap, &recorded).map_err(|e| format!("{name}: {e}"))?;
    if hs.is_empty() {
        return Err(format!(
            "{name}: no allocations in the trace: record with torch.cuda.memory._record_memory_history() to replay"
        ));
    }
    Ok(Source {
        name,
        snap,
        recorded,
        checkable: true,
        histories: hs,
        layer,
        problems: Vec::new(),
    })
}
