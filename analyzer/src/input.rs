//! Which files make a run: a trace file, or a directory of them (one per process); and
//! opening them, regular files only.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Trace files named by `paths`: files as given, directories expanded to their `*.jsonl`
/// entries (sorted by name) that are not directories. A directory with no trace is an
/// error that says so; an entry that is no regular file (a FIFO, a device) is kept, so
/// that opening it reports it rather than passing over it.
pub fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        let meta =
            std::fs::metadata(path).map_err(|e| format!("{}: {}", path.display(), why(&e)))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| format!("{}: cannot read directory: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| is_trace_name(p) && !p.is_dir())
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "{}: no trace files (*.jsonl) in this directory",
                    path.display()
                ));
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// What went wrong, in words: the system's, but a missing file as it always was said.
fn why(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        // ELOOP and the rest: "Too many levels of symbolic links (os error 40)".
        _ => e.to_string(),
    }
}

fn is_trace_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "jsonl")
}

/// Opens `path` for reading if it is a regular file. Opened without blocking, then
/// checked on the open descriptor: a FIFO would block the open (or the first read)
/// forever, and a device such as `/dev/zero`, behind a symlink with a trace's or a
/// snapshot's name, never ends.
pub fn open_regular(path: &Path) -> Result<File, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open: {}", why(&e)))?;
    let kind = file
        .metadata()
        .map_err(|e| format!("cannot read: {e}"))?
        .file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    Err(format!("not a regular file ({what}): not read"))
}

/// The whole of regular file `path`, refused when longer than `limit` bytes. Errors name
/// the file.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut data = Vec::new();
    // One byte past the limit tells a file at the limit from a longer one, even when the
    // file grows while it is read.
    file.take(limit + 1)
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
