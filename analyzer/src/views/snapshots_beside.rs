//! The PyTorch snapshots `vramtrace run`'s hook writes beside the traces, and which
//! process of the run wrote each.
//!
//! Names: `torch-snapshot-HOST-PID[-oom[-N]][.K].pickle` (`.K` when the name was taken: an
//! exec'd image of the same pid), and from older versions `torch-snapshot-PID[-oom[-N]].pickle`.
//! A directory shared by several nodes holds the same pid many times, so a snapshot goes
//! to the process of its host and pid (any host for an old name) whose trace started last
//! before the snapshot's own last entry.

use crate::model::ProcessModel;
use crate::run::Run;
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

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The host (None in an old name) and pid a snapshot file's name gives.
pub(crate) fn writer(name: &str) -> Option<(Option<String>, u32)> {
    let stem = name
        .strip_prefix("torch-snapshot-")?
        .strip_suffix(".pickle")?;
    // `.K`: a numbered name. A host's dots are never last: the pid follows the host.
    let stem = match stem.rsplit_once('.') {
        Some((before, k)) if digits(k).is_some() => before,
        _ => stem,
    };
    let parts: Vec<&str> = stem.split('-').collect();
    // The pid is the last part, or the one before `oom` or `oom-N`.
    let at = match parts.as_slice() {
        [.., p, "oom", n] if digits(p).is_some() && digits(n).is_some() => parts.len() - 3,
        [.., p, "oom"] if digits(p).is_some() => parts.len() - 2,
        _ => parts.len() - 1,
    };
    let pid = digits(parts[at])?;
    let host = (at > 0).then(|| parts[..at].join("-"));
    Some((host, pid))
}

/// The process of `run` that wrote `file`, whose snapshot's last entry is at `time_us`
/// (wall clock, when it has one).
pub fn owner(run: &Run, file: &SnapshotFile, time_us: Option<u64>) -> Option<usize> {
    owner_of(&run.processes, file, time_us)
}

/// Whether process `m` could have written `file`, by the pid and host in its name.
pub fn may_own(m: &ProcessModel, file: &SnapshotFile) -> bool {
    m.header.pid == file.pid && file.host.as_ref().is_none_or(|h| *h == m.header.host)
}

/// [`owner`] among `processes`, before a run is made of them.
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

#[cfg(test)]
mod tests {
    use super::writer;

    #[test]
    fn names_new_and_old() {
        let h = |s: &str| Some(s.to_string());
        assert_eq!(
            writer("torch-snapshot-node1-42.pickle"),
            Some((h("node1"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-a-b.c-42-oom.pickle"),
            Some((h("a-b.c"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-n-7-42-oom-3.1.pickle"),
            Some((h("n-7"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-10.0.0.5-42.2.pickle"),
            Some((h("10.0.0.5"), 42))
        );
        assert_eq!(
            writer("torch-snapshot-gpu-oom-42.pickle"),
            Some((h("gpu-oom"), 42))
        );
        assert_eq!(writer("torch-snapshot-42.pickle"), Some((None, 42)));
        assert_eq!(writer("torch-snapshot-42-oom-2.pickle"), Some((None, 42)));
        assert_eq!(writer("torch-snapshot-node1.pickle"), None);
        assert_eq!(writer("torch-42.json"), None);
    }
}
