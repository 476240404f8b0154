//! Opening an input that must be a regular file: a trace, a snapshot, a pack.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

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

/// What went wrong, in words: the system's, but a missing file as it always was said.
pub fn why(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        // ELOOP and the rest: "Too many levels of symbolic links (os error 40)".
        _ => e.to_string(),
    }
}
