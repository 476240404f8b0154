//! Creating the files vramtrace writes (reports, exports, SVGs, folded stacks, the
//! Python hook): private (mode 0600, whatever the umask: a report holds command lines,
//! host names and the program's function names), never through a symbolic link (one
//! planted in a shared directory would have the write land where it points), and never
//! over an existing file unless the user asked (`--force`).

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Creates `path` new. With `replace`, an existing regular file of that name is removed
/// first; anything else there (a symbolic link, a directory, a device) is refused.
pub fn create(path: &Path, replace: bool) -> Result<File, String> {
    let shown = path.display();
    if replace {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            let kind = meta.file_type();
            let what = if kind.is_symlink() {
                Some("a symbolic link")
            } else if kind.is_dir() {
                Some("a directory")
            } else if kind.is_file() {
                None
            } else if kind.is_fifo() || kind.is_socket() {
                Some("a pipe or socket")
            } else {
                Some("a device")
            };
            if let Some(what) = what {
                return Err(format!("{shown}: is {what}; not replaced"));
            }
            std::fs::remove_file(path).map_err(|e| format!("{shown}: cannot replace: {e}"))?;
        }
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists if is_symlink(path) => {
                format!("{shown}: is a symbolic link; not followed")
            }
            std::io::ErrorKind::AlreadyExists if replace => {
                format!("{shown}: appeared while it was being replaced; not written")
            }
            std::io::ErrorKind::AlreadyExists => {
                format!("{shown}: already exists; not replaced (--force replaces it)")
            }
            _ => format!("{shown}: cannot create: {e}"),
        })
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}
