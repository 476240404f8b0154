//! A `vramtrace run` directory as replay input: the PyTorch hook's snapshot of one
//! process (`torch-snapshot-PID.pickle`, written at exit, or else its last
//! `torch-snapshot-PID-oom*.pickle`), with the allocator settings from `torch-PID.json`
//! where the snapshot does not record them (PyTorch before 2.4).

use std::path::{Path, PathBuf};

/// The snapshot to replay, and the `PYTORCH_ALLOC_CONF` the process ran with, if known.
pub struct RunInput {
    pub snapshot: PathBuf,
    pub alloc_conf: Option<String>,
}

pub fn resolve(dir: &Path) -> Result<RunInput, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
    // (pid, is the exit snapshot, name) for every hook snapshot.
    let mut found: Vec<(u32, bool, String)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("torch-snapshot-") else {
            continue;
        };
        let Some(stem) = rest.strip_suffix(".pickle") else {
            continue;
        };
        let digits: String = stem.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(pid) = digits.parse() {
            found.push((pid, stem == digits, name));
        }
    }
    let mut pids: Vec<u32> = found.iter().map(|f| f.0).collect();
    pids.sort_unstable();
    pids.dedup();
    let pid = match pids[..] {
        [pid] => pid,
        [] => {
            return Err(format!(
                "{}: no torch-snapshot-PID.pickle (the PyTorch hook of `vramtrace run` writes one)",
                dir.display()
            ))
        }
        _ => {
            let names: Vec<String> = found.iter().map(|f| f.2.clone()).collect();
            return Err(format!(
                "{}: snapshots of {} processes; give one: {}",
                dir.display(),
                pids.len(),
                names.join(", ")
            ));
        }
    };
    // The exit snapshot has the longest history; else the last out-of-memory one.
    found.sort_by_key(|(_, exit, name)| (*exit, name.len(), name.clone()));
    let name = &found.last().expect("one snapshot at least").2;
    Ok(RunInput {
        snapshot: dir.join(name),
        alloc_conf: alloc_conf(&dir.join(format!("torch-{pid}.json")))?,
    })
}

/// `PYTORCH_ALLOC_CONF` (read first since torch 2.9) or `PYTORCH_CUDA_ALLOC_CONF`.
fn alloc_conf(path: &Path) -> Result<Option<String>, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let info: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: line {}: {e}", path.display(), e.line()))?;
    Ok(["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .iter()
        .find_map(|k| info.get(*k).and_then(|v| v.as_str()))
        .map(str::to_string))
}
