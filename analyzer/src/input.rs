//! Which files make a run: a trace file, or a directory of them (one per process).

use std::path::{Path, PathBuf};

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// files (sorted by name). A directory with no trace is an error that says so.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| format!("{}: cannot read directory: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| is_trace_name(p) && p.is_file())
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{}: no trace files (*.jsonl) in this directory",
                    path.display()
                ));
            }
            found.sort();
            files.extend(crate::run_id::select(path, found)?);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(format!("{}: no such file or directory", path.display()));
        }
    }
    Ok(files)
}

fn is_trace_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "jsonl")
}
