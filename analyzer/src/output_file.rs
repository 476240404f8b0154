//! Creating the files vramtrace writes (reports, exports, SVGs, folded stacks, the
//! Python hook): private (mode 0600, whatever the umask: a report holds command lines,
//! host names and the program's function names), never through a symbolic link (one
//! planted in a shared directory would have the write land where it points), and never
//! over an existing file unless the user asked (`--force`).

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why `path` cannot be written (`replace`: the user's `--force`), or None when it can:
/// nothing is there, or a regular file to replace. Commands ask before a long load, so
/// that a taken name fails at once; [`create`] asks again.
pub fn refusal(path: &Path, replace: bool) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let kind = meta.file_type();
    let what = if kind.is_symlink() {
        return Some(format!(
            "{}: is a symbolic link; not followed",
            path.display()
        ));
    } else if kind.is_file() {
        if replace {
            return None;
        }
        return Some(format!(
            "{}: already exists; not replaced (--force replaces it)",
            path.display()
        ));
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() || kind.is_socket() {
        "a pipe or socket"
    } else {
        "a device"
    };
    Some(format!("{}: is {what}; not replaced", path.display()))
}

/// Creates `path` new. With `replace`, an existing regular file of that name is removed
/// first; anything else there (a symbolic link, a directory, a device) is refused.
pub fn create(path: &Path, replace: bool) -> Result<File, String> {
    if let Some(why) = refusal(path, replace) {
        return Err(why);
    }
    if replace && path.exists() {
        std::fs::remove_file(path)
            .map_err(|e| format!("{}: cannot replace: {e}", path.display()))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            // Planted between the look and the open: O_EXCL refused it.
            std::io::ErrorKind::AlreadyExists => refusal(path, false)
                .unwrap_or_else(|| format!("{}: appeared while being created", path.display())),
            _ => format!("{}: cannot create: {e}", path.display()),
        })
}
