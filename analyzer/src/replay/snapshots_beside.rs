//! The PyTorch snapshots `vramtrace run`'s hook writes beside the traces, and which
//! process of the run wrote each.
//!
//! Names: `torch-snapshot-HOST-PID[-oom[-N]][.K].pickle` (`.K` when the name was taken: an
//! exec'd image of the same pid), and from older versions `torch-snapshot-PID[-oom[-N]].pickle`.
//! A directory shared by several nodes holds the same pid many times, so a snapshot goes
//! to the process of its host and pid (any host for an old name) whose trace started last
//! before the snapshot's own last entry.

use crate::model::ProcessModel;
use crate::snapshot::names::writer;
use std::path::PathBuf;

/// A snapshot file and who its name says wrote it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SnapshotFile {
    pub path: PathBuf,
    /// None for an old name, which has the pid alone.
    pub host: Option<String>,
    pub pid: u32,
}

/// Snapshot files in the directories of `paths`, sorted by path.
pub fn snapshots_beside(paths: &[PathBuf]) -> Vec<SnapshotFile> {
    let mut out = Vec::new();
    for dir in paths.iter().filter(|p| p.is_dir()) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((host, pid)) = writer(&name) {
                out.push(SnapshotFile {
                    path: entry.path(),
                    host,
                    pid,
                });
            }
        }
    }
    out.sort();
    out
}

/// Whether process `m` could have written `file`, by the pid and host in its name.
pub fn may_own(m: &ProcessModel, file: &SnapshotFile) -> bool {
    m.header.pid == file.pid && file.host.as_ref().is_none_or(|h| *h == m.header.host)
}

/// The process among `processes` that wrote `file`, whose snapshot's last entry is at
/// `time_us` (wall clock, when it has one).
pub fn owner_of(
    processes: &[ProcessModel],
    file: &SnapshotFile,
    time_us: Option<u64>,
) -> Option<usize> {
    let candidates = processes
        .iter()
        .enumerate()
        .filter(|(_, m)| may_own(m, file));
    let started = |i: &usize| processes[*i].header.start_unix_ns;
    let all: Vec<usize> = candidates.map(|(i, _)| i).collect();
    let before = time_us.map(|t| t.saturating_mul(1000));
    all.iter()
        .copied()
        .filter(|i| before.is_none_or(|t| started(i) <= t))
        .max_by_key(started)
        .or_else(|| all.first().copied())
}
