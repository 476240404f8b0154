//! The `oom` post-mortem of a snapshot, by replay: for each recorded out-of-memory error,
//! which common settings would have avoided it (crate::whatif::avoid).

use crate::whatif::{History, Settings};
use serde_json::{json, Value};

/// The replay histories of a snapshot, for the `oom` post-mortem; `None` where the
/// snapshot cannot be replayed (the reason goes into the answer).
pub struct OomReplays {
    histories: Result<Vec<History>, String>,
}

pub fn oom_replays(snap: &crate::snapshot::Snapshot) -> OomReplays {
    let histories = Settings::from_recorded(snap.allocator_settings.as_ref()).and_then(|mut s| {
        crate::whatif::from_snapshot::infer_expandable(snap, &mut s);
        crate::whatif::from_snapshot::histories(snap, &s)
    });
    OomReplays { histories }
}

impl OomReplays {
    /// `avoided_by` of docs/json.md: which common settings avoid the failure at `entry`.
    pub fn avoided_by(&self, device: i64, entry: usize, device_free: Option<u64>) -> Value {
        let hs = match &self.histories {
            Ok(hs) => hs,
            Err(e) => return json!({ "error": e }),
        };
        let Some(h) = hs.iter().find(|h| h.device == device) else {
            return Value::Null;
        };
        if device_free.is_none() {
            return json!({ "error": "the entry does not say what the driver had free" });
        }
        match crate::whatif::avoid::avoided_by(h, entry) {
            Ok(Some(a)) => json!({
                "capacity_bytes": a.capacity,
                "reproduced": a.reproduced,
                "settings": a.settings.iter().map(|(k, v)| match v {
                    Ok(v) => json!({"settings": k, "avoids": v}),
                    Err(e) => json!({"settings": k, "avoids": null, "error": e}),
                }).collect::<Vec<_>>(),
                "already_set": a.already_set,
            }),
            Ok(None) => Value::Null,
            Err(e) => json!({ "error": e }),
        }
    }
}

/// Gives each failure that a snapshot's `oom` entry stands for its `avoided_by`: the n-th
/// failure of a snapshot's process on a device is that device's n-th `oom` entry.
pub fn add_avoided_by(run: &crate::replay::Run, failures: &mut [crate::views::oom::Postmortem]) {
    for process in &run.processes {
        let failed = failures
            .iter()
            .any(|f| f.pid == process.header.pid && f.host == process.header.host);
        if !failed || !crate::input::is_snapshot(&process.path) {
            continue;
        }
        // Read again for the replay, which needs no frames.
        let Ok(snap) = crate::snapshot::read::read_snapshot_without_history_frames(&process.path)
        else {
            continue;
        };
        let replays = oom_replays(&snap);
        for d in &snap.devices {
            let mine = failures.iter_mut().filter(|f| {
                f.pid == process.header.pid
                    && f.host == process.header.host
                    && i64::from(f.device) == d.device
            });
            let ooms = d.trace.iter().enumerate();
            let ooms = ooms.filter(|(_, e)| e.action == crate::snapshot::model::Action::Oom);
            for (failure, (index, entry)) in mine.zip(ooms) {
                failure.avoided_by = Some(replays.avoided_by(d.device, index, entry.device_free));
            }
        }
    }
}
