//! Which files make a run: a trace file, or a directory of them (one per process).

use std::path::{Path, PathBuf};

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// files and PyTorch snapshots (`*.pickle`, `*.pkl`; sorted by name). The snapshots the
/// PyTorch hook writes beside traces (`torch-snapshot-*`) are left to the timeline, which
/// puts them on the traces' clock: as processes of their own they would count the
/// traced segments twice. A directory with no trace is an error that says so.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| format!("{}: cannot read directory: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| (is_trace_name(p) || is_own_snapshot_name(p)) && p.is_file())
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{}: no trace files (*.jsonl) or PyTorch snapshots (*.pickle, *.pkl) in this directory",
                    path.display()
                ));
            }
            found.sort();
            files.extend(found);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(format!("{}: no such file or directory", path.display()));
        }
    }
    Ok(files)
}

/// Whether a file is a pickle (a PyTorch snapshot, or something that will be refused as
/// one): the protocol 2+ marker byte, or a pickle's name.
pub fn is_snapshot(path: &Path) -> bool {
    use std::io::Read;
    let named = path
        .extension()
        .is_some_and(|e| e == "pickle" || e == "pkl");
    let mut first = [0u8; 1];
    let marked = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut first))
        .is_ok()
        && first[0] == 0x80;
    named || marked
}

/// A snapshot saved by a program itself, not by the hook beside its traces.
fn is_own_snapshot_name(p: &Path) -> bool {
    let hook = p
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("torch-snapshot-"));
    !hook && p.extension().is_some_and(|e| e == "pickle" || e == "pkl")
}

fn is_trace_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "jsonl")
}
