//! Which files make a run: a trace file, or a directory of them (one per process).

use std::path::{Path, PathBuf};

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// files, or, in a directory without any, its PyTorch snapshots (`*.pickle`, `*.pkl`;
/// sorted by name). Beside traces, snapshots are the hook's (`torch-snapshot-*`, which the
/// timeline puts on the traces' clock) or an export of the run itself (`export --format
/// memory-viz -o DIR/run.pickle`): as processes of their own they would count the traced
/// memory twice. A directory with neither is an error that says so.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| format!("{}: cannot read directory: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            let mut found: Vec<PathBuf> = entries
                .iter()
                .filter(|p| is_trace_name(p))
                .cloned()
                .collect();
            if found.is_empty() {
                found = entries
                    .into_iter()
                    .filter(|p| is_snapshot_name(p))
                    .collect();
            }
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
    let named = is_snapshot_name(path);
    let mut first = [0u8; 1];
    let marked = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut first))
        .is_ok()
        && first[0] == 0x80;
    named || marked
}

fn is_snapshot_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "pickle" || e == "pkl")
}

fn is_trace_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "jsonl")
}
