//! The out-of-memory errors the PyTorch hook lists in `torch-HOST-PID.json` (beside the
//! traces), given to the traced failures they were: PyTorch's out-of-memory observer saw
//! the driver's free bytes and the device's total (or the process's limit) at that moment,
//! which the post-mortem uses where vramtrace did not ask the driver itself.
//!
//! The list has no times, so it is matched in order: each entry to the next failed
//! allocation of the same device and size (`allocation_bytes` is what the allocator tried
//! to reserve, the size of the `cudaMalloc` that failed). The caching allocator retries a
//! failed `cudaMalloc` after freeing its cache, and calls the observer once, after the last
//! try: failed calls of one size with no successful allocation between them are one error,
//! and its figure goes to the last of them.

use super::snapshots_beside::{owner_of, SnapshotFile};
use super::Run;
use crate::snapshot::events::SNAPSHOT_INTERPOSER;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use vramtrace_schema::Op;

/// The most a `torch-*.json` may hold: a list of a million errors is far less.
const INFO_LIMIT: u64 = 256 << 20;

#[derive(Deserialize)]
struct Info {
    #[serde(default)]
    ooms: Vec<Oom>,
}

#[derive(Deserialize)]
struct Oom {
    device: Option<i32>,
    allocation_bytes: Option<u64>,
    device_limit_bytes: Option<u64>,
    device_free_bytes: Option<u64>,
}

/// The host (None in an old name) and pid of `torch-HOST-PID[.K].json`.
fn writer(name: &str) -> Option<(Option<String>, u32)> {
    let stem = name.strip_prefix("torch-")?.strip_suffix(".json")?;
    if stem.starts_with("snapshot-") {
        return None;
    }
    let stem = match stem.rsplit_once('.') {
        Some((before, k)) if k.bytes().all(|b| b.is_ascii_digit()) && !k.is_empty() => before,
        _ => stem,
    };
    let (host, pid) = match stem.rsplit_once('-') {
        Some((host, pid)) => (Some(host.to_string()), pid),
        None => (None, stem),
    };
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((host, pid.parse().ok()?))
}

/// Gives the hook's out-of-memory figures in directories `dirs` to the failures of the
/// traced processes that wrote them. What cannot be matched is named in `run.notes`.
pub fn attach(dirs: &[PathBuf], run: &mut Run) {
    for dir in dirs.iter().filter(|p| p.is_dir()) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<(PathBuf, Option<String>, u32)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                writer(&name).map(|(host, pid)| (e.path(), host, pid))
            })
            .collect();
        files.sort();
        for (path, host, pid) in files {
            let file = SnapshotFile { path, host, pid };
            let Some(p) = owner_of(&run.processes, &file, None) else {
                continue;
            };
            if run.processes[p].header.interposer == SNAPSHOT_INTERPOSER {
                continue;
            }
            match read(&file.path) {
                Ok(ooms) if !ooms.is_empty() => {
                    if let Some(note) = give(run, p, &file.path, &ooms) {
                        run.notes.push(note);
                    }
                }
                Ok(_) => {}
                Err(e) => run.notes.push(format!("note: {e} (not used)")),
            }
        }
    }
}

fn read(path: &Path) -> Result<Vec<Oom>, String> {
    let data = crate::input::read_regular(path, INFO_LIMIT)?;
    let info: Info = serde_json::from_slice(&data)
        .map_err(|e| format!("{}: line {}: {e}", path.display(), e.line()))?;
    Ok(info.ooms)
}

/// Matches `ooms` to process `p`'s failures; a note when some match none.
fn give(run: &mut Run, p: usize, path: &Path, ooms: &[Oom]) -> Option<String> {
    let failures = &mut run.processes[p].failures;
    // The last failed call of each error: (index, device, size).
    let mut errors: Vec<(usize, i32, u64)> = Vec::new();
    for (k, f) in failures.iter().enumerate() {
        let device_memory = f.event.api.kind().is_device_memory() || f.event.api.op() == Op::Create;
        if !device_memory {
            continue;
        }
        let retry = k > 0 && {
            let before = &failures[k - 1];
            before.event.dev == f.event.dev
                && before.requested == f.requested
                && before.allocations_before == f.allocations_before
        };
        if retry {
            errors.pop();
        }
        errors.push((k, f.event.dev, f.requested));
    }
    let mut next = 0;
    let mut unmatched = 0;
    for oom in ooms {
        let found = errors[next..].iter().position(|&(_, dev, size)| {
            Some(dev) == oom.device && Some(size) == oom.allocation_bytes
        });
        let (Some(at), Some(free)) = (found, oom.device_free_bytes) else {
            unmatched += 1;
            continue;
        };
        let f = &mut failures[errors[next + at].0];
        f.device_free = Some(free);
        f.device_total = oom.device_limit_bytes;
        next += at + 1;
    }
    (unmatched > 0).then(|| {
        format!(
            "note: {}: {} of its {} out-of-memory errors match no failed allocation of the trace in order (same device and size): their figures are not used",
            path.display(),
            unmatched,
            ooms.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::writer;

    #[test]
    fn names() {
        let h = |s: &str| Some(s.to_string());
        assert_eq!(writer("torch-node1-42.json"), Some((h("node1"), 42)));
        assert_eq!(writer("torch-a-b.c-42.1.json"), Some((h("a-b.c"), 42)));
        assert_eq!(writer("torch-42.json"), Some((None, 42)));
        assert_eq!(writer("torch-snapshot-node1-42.json"), None);
        assert_eq!(writer("torch-node1-42.pickle"), None);
        assert_eq!(writer("torch-node1.json"), None);
    }
}
