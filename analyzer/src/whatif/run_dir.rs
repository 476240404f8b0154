//! A `vramtrace run` directory as replay input: the PyTorch hook's snapshot of one
//! process (`torch-snapshot-HOST-PID.pickle`, written at exit, or else its last
//! `torch-snapshot-HOST-PID-oom*.pickle`; older hooks left out `HOST-`), with the
//! allocator settings from `torch-HOST-PID.json`
//! where the snapshot does not record them (PyTorch before 2.4).

use std::path::{Path, PathBuf};

/// The snapshot to replay, and the `PYTORCH_ALLOC_CONF` the process ran with, if known.
pub struct RunInput {
    pub snapshot: PathBuf,
    pub alloc_conf: Option<String>,
    /// The host (absent from older names) and pid of the process that wrote it.
    pub host: Option<String>,
    pub pid: u32,
}

/// `None` when the directory has no hook snapshot.
pub fn resolve(dir: &Path) -> Result<Option<RunInput>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
    // (host, pid), whether it is the exit snapshot, and the name of every hook snapshot.
    type Writer = (Option<String>, u32);
    let mut found: Vec<(Writer, bool, String)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(writer) = crate::snapshot::names::writer(&name) {
            let exit = !name.contains("-oom");
            found.push((writer, exit, name));
        }
    }
    let mut writers: Vec<&Writer> = found.iter().map(|f| &f.0).collect();
    writers.sort_unstable();
    writers.dedup();
    let (host, pid) = match writers[..] {
        [writer] => writer.clone(),
        [] => return Ok(None),
        _ => {
            let names: Vec<String> = found.iter().map(|f| f.2.clone()).collect();
            return Err(format!(
                "{}: snapshots of {} processes; give one: {}",
                dir.display(),
                writers.len(),
                names.join(", ")
            ));
        }
    };
    // The exit snapshot has the longest history; else the last out-of-memory one.
    found.sort_by_key(|(_, exit, name)| (*exit, name.len(), name.clone()));
    let name = &found.last().expect("one snapshot at least").2;
    // Named by host and pid, or by pid alone (before hook files carried the host).
    let info = match &host {
        Some(host) => format!("torch-{host}-{pid}.json"),
        None => format!("torch-{pid}.json"),
    };
    Ok(Some(RunInput {
        snapshot: dir.join(name),
        alloc_conf: alloc_conf(&dir.join(info))?,
        host,
        pid,
    }))
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
