//! Which files make a run: a trace file, or a directory of them (one per process).

use std::path::{Path, PathBuf};
use vramtrace_schema::reader::compressed;

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// files (also `*.jsonl.gz`, `*.jsonl.zst`) (sorted by name). A directory with no trace is an error that says so.
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
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| format!("{}: cannot read directory: {e}", shown.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| is_trace_name(p) && p.is_file())
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{}: no trace files (*.jsonl) in this directory",
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

fn is_trace_name(p: &Path) -> bool {
    compressed::inner_name(p)
        .extension()
        .is_some_and(|e| e == "jsonl")
}
