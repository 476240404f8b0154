//! Which files make a run: a trace file, a directory of them (one per process), a
//! directory of snapshots, or a pack; and opening them, regular files only.

use crate::regular_file::{open_regular, why};
use std::io::Read;
use std::path::{Path, PathBuf};
use vramtrace_schema::reader::compressed;

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// entries (also `*.jsonl.gz`, `*.jsonl.zst`) that are not directories, or, in a directory
/// without any, its PyTorch snapshots (`*.pickle`, `*.pkl`, also compressed; sorted by
/// name). Beside traces, snapshots are the hook's (`torch-snapshot-*`, which the timeline
/// puts on the traces' clock) or an export of the run itself (`export --format memory-viz
/// -o DIR/run.pickle`): as processes of their own they would count the traced memory
/// twice. A pack reads as the directory it was made from. A directory with neither is an
/// error that says so; an entry that is no regular file (a FIFO, a device) is kept, so
/// that opening it reports it rather than passing over it.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        let meta =
            std::fs::metadata(path).map_err(|e| format!("{}: {}", path.display(), why(&e)))?;
        // A pack reads as the directory it was made from; messages name the pack.
        let (path, shown) = if meta.is_file() && crate::pack::is_pack(path) {
            (crate::pack::unpack(path)?, path)
        } else {
            (path.clone(), path)
        };
        if path.is_dir() {
            let entries: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| format!("{}: cannot read directory: {e}", shown.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| !p.is_dir())
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
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

fn is_trace_name(p: &Path) -> bool {
    compressed::inner_name(p)
        .extension()
        .is_some_and(|e| e == "jsonl")
}

fn is_snapshot_name(p: &Path) -> bool {
    compressed::inner_name(p)
        .extension()
        .is_some_and(|e| e == "pickle" || e == "pkl")
}

/// Whether a file is a pickle (a PyTorch snapshot, or something that will be refused as
/// one): a pickle's name, or the protocol 2+ marker byte, compressed or not. Only a
/// regular file is opened to look.
pub fn is_snapshot(path: &Path) -> bool {
    let mut first = [0u8; 1];
    is_snapshot_name(path)
        || open_regular(path)
            .ok()
            .and_then(|f| compressed::decompressed(f).ok())
            .is_some_and(|mut r| r.read_exact(&mut first).is_ok() && first[0] == 0x80)
}

/// The whole content of regular file `path` (decompressed, where gzip or zstd), refused
/// when longer than `limit` bytes. Errors name the file.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let content = compressed::decompressed(file)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut data = Vec::new();
    // One byte past the limit tells a file at the limit from a longer one, even when the
    // file grows while it is read.
    content
        .take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    if data.len() as u64 > limit {
        return Err(format!(
            "{}: longer than {} bytes, the most a file of this kind may be: not read",
            path.display(),
            limit
        ));
    }
    Ok(data)
}
