//! What the report calls a process: `pid 12`, or for a PyTorch snapshot its file
//! (`rank3_snapshot.pickle`): a snapshot carries no pid (it reads as pid 0, or the pid in
//! its name), and several snapshots of one run would all be "pid 0". Each snapshot is its
//! own host (snapshot/events.rs), so a process is found by host and pid.

use super::summary::{ProcessSummary, Summary};
use crate::snapshot::events::SNAPSHOT_INTERPOSER;

/// `pid 12`, or a snapshot's file name.
pub fn of_process(p: &ProcessSummary) -> String {
    if p.interposer != SNAPSHOT_INTERPOSER {
        return format!("pid {}", p.pid);
    }
    p.path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| p.host.clone())
}

/// The process `pid` on `host` (any host when none of its processes matches).
pub fn of(s: &Summary, host: &str, pid: u32) -> String {
    s.processes
        .iter()
        .find(|p| p.pid == pid && p.host == host)
        .or_else(|| s.processes.iter().find(|p| p.pid == pid))
        .map_or_else(|| format!("pid {pid}"), of_process)
}

/// As [`of`], with its rank where it has one: `pid 12 rank 1`.
pub fn with_rank(s: &Summary, host: &str, pid: u32) -> String {
    let rank = s
        .processes
        .iter()
        .find(|p| p.pid == pid && p.host == host)
        .and_then(|p| p.rank.as_deref());
    match rank {
        Some(r) => format!("{} rank {r}", of(s, host, pid)),
        None => of(s, host, pid),
    }
}
