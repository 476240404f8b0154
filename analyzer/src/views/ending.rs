//! How a process's trace ended, which says what the memory it still held then was: a leak
//! only where the process exited normally; otherwise the state at the moment it died (or
//! a snapshot was dumped). `report` and `summary` word it alike.

use super::summary::{ProcessSummary, Summary};
use crate::snapshot::events::SNAPSHOT_INTERPOSER;
use serde::Serialize;

/// Serialised by [`Ending::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Ending {
    #[serde(rename = "exited")]
    Exited,
    #[serde(rename = "killed")]
    Killed,
    #[serde(rename = "failed allocation")]
    Failed,
    #[serde(rename = "snapshot")]
    Snapshot,
}

impl Ending {
    /// The process `pid`'s ending (exited, where the summary has no such process).
    pub fn of(summary: &Summary, pid: u32) -> Ending {
        summary
            .processes
            .iter()
            .find(|p| p.pid == pid)
            .map_or(Ending::Exited, Ending::of_process)
    }

    pub fn of_process(p: &ProcessSummary) -> Ending {
        if p.interposer == SNAPSHOT_INTERPOSER {
            Ending::Snapshot
        } else if !p.complete {
            Ending::Killed
        } else if p.failed_allocations > 0 {
            Ending::Failed
        } else {
            Ending::Exited
        }
    }

    /// Its name in the JSON (`report`'s `ending`).
    pub fn name(self) -> &'static str {
        match self {
            Ending::Exited => "exited",
            Ending::Killed => "killed",
            Ending::Failed => "failed allocation",
            Ending::Snapshot => "snapshot",
        }
    }

    /// The moment the memory it held at the end was held: `... still live {when}`.
    pub fn when(self) -> &'static str {
        match self {
            Ending::Exited => "when its process exited",
            Ending::Killed => "when its process was killed",
            Ending::Snapshot => "when the snapshot was taken",
            Ending::Failed => "when the program ended after its failed allocation",
        }
    }
}

/// `; 22.4 GiB was still reserved when ... (not a leak)`: memory held at the end by
/// processes that did not exit normally (`endings`), `held` naming how (`live`,
/// `reserved`); empty when there is none.
pub fn not_a_leak(bytes: u64, endings: &[Ending], held: &str) -> String {
    if bytes == 0 {
        return String::new();
    }
    let when: Vec<&str> = endings.iter().map(|e| e.when()).collect();
    format!(
        "; {} was still {held} {} (not a leak)",
        crate::units::bytes(bytes),
        when.join(" or ")
    )
}
