//! Which files make a run: a trace file, or a directory of them (one per process).

use std::path::{Path, PathBuf};
use vramtrace_schema::reader::compressed;

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// files (also `*.jsonl.gz`, `*.jsonl.zst`), or, in a directory without any, its PyTorch
/// snapshots (`*.pickle`, `*.pkl`, also compressed; sorted by name). Beside traces,
/// snapshots are the hook's (`torch-snapshot-*`, which the timeline puts on the traces'
/// clock) or an export of the run itself (`export --format memory-viz -o DIR/run.pickle`):
/// as processes of their own they would count the traced memory twice. A pack reads as
/// the directory it was made from. A directory with neither is an error that says so.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        // A pack reads as the directory it was made from; messages name the pack.
        let (path, shown) = if crate::pack::is_pack(path) {
            (crate::pack::unpack(path)?, path)
        } else {
            (path.clone(), path)
        };
        if path.is_dir() {
            let entries: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| format!("{}: cannot read directory: {e}", shown.display()))?
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
                    shown.display()
                ));
            }
            found.sort();
            files.extend(crate::run_id::select(shown, found)?);
        } else if path.exists() {
            files.push(path);
        } else {
            return Err(format!("{}: no such file or directory", path.display()));
        }
    }
    Ok(files)
}

/// Whether a file is a pickle (a PyTorch snapshot, or something that will be refused as
/// one): the protocol 2+ marker byte, or a pickle's name; compressed or not.
pub fn is_snapshot(path: &Path) -> bool {
    use std::io::Read;
    let named = is_snapshot_name(path);
    let mut first = [0u8; 1];
    let marked = compressed::open(path)
        .and_then(|mut f| f.read_exact(&mut first))
        .is_ok()
        && first[0] == 0x80;
    named || marked
}

fn is_snapshot_name(p: &Path) -> bool {
    compressed::inner_name(p)
        .extension()
        .is_some_and(|e| e == "pickle" || e == "pkl")
}

fn is_trace_name(p: &Path) -> bool {
    compressed::inner_name(p)
        .extension()
        .is_some_and(|e| e == "jsonl")
}
