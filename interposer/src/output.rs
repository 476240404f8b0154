//! The trace file: its name from the pattern, created safely.

use std::ffi::CString;
use std::io;

/// Expands `%p` (pid), `%h` (host), `%r` (rank) and `%%`. A pattern ending in `/` is a
/// directory that gets the default file name. Host and rank come from outside the
/// pattern (`RANK=../../x`) and are [`sanitized`]: they can only name a part of one file
/// name, never another directory.
pub fn expand(pattern: &str, pid: u32, host: &str, rank: &str) -> String {
    let pattern = if pattern.ends_with('/') {
        format!("{pattern}vramtrace-%h-%p.jsonl")
    } else {
        pattern.to_string()
    };
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('h') => out.push_str(&sanitized(host)),
            Some('r') => out.push_str(&sanitized(rank)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// A substituted value as part of one file name: `/`, control characters and every `..`
/// become `_` (so `..` can never be a path component), and an empty value is `_`.
pub fn sanitized(value: &str) -> String {
    let cleaned: String = value
        .chars()
        .map(|c| if c == '/' || c.is_control() { '_' } else { c })
        .collect();
    let cleaned = cleaned.replace("..", "__");
    if cleaned.is_empty() {
        "_".into()
    } else {
        cleaned
    }
}

/// `name.jsonl` -> `name.N.jsonl`: the name for the N-th image of one pid (after exec).
fn numbered(path: &str, n: u32) -> String {
    if n == 0 {
        return path.to_string();
    }
    match path.strip_suffix(".jsonl") {
        Some(stem) => format!("{stem}.{n}.jsonl"),
        None => format!("{path}.{n}"),
    }
}

fn open_exclusive(path: &str) -> io::Result<i32> {
    let c = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // O_EXCL with O_CREAT never follows a symlink and never opens an existing file;
    // O_NOFOLLOW says the same for the last component explicitly.
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

fn is_regular_file(path: &str) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_file())
        .unwrap_or(false)
}

/// Creates the trace file, mode 0600. An existing regular file (the trace of this pid
/// before an exec, or an older run) is kept and the next number is tried; anything else
/// in the way (a symlink, a device, a directory) is an error: no link is followed and
/// nothing is overwritten.
pub fn create(path: &str) -> Result<(i32, String), String> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
    }
    for n in 0..1000 {
        let candidate = numbered(path, n);
        match open_exclusive(&candidate) {
            Ok(fd) => return Ok((fd, candidate)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && is_regular_file(&candidate) => {
                continue
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(format!(
                    "cannot create trace file {candidate}: it already exists and is not a regular file (a symlink is never followed)"
                ))
            }
            Err(e) => return Err(format!("cannot create trace file {candidate}: {e}")),
        }
    }
    Err(format!(
        "cannot create trace file {path}: 1000 numbered names already exist"
    ))
}

/// Writes all of `bytes`, retrying short writes and EINTR.
pub fn write_all(fd: i32, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_expansion() {
        assert_eq!(
            expand("t-%p-%h-%r.jsonl", 42, "node1", "3"),
            "t-42-node1-3.jsonl"
        );
        assert_eq!(expand("out/", 7, "h", "0"), "out/vramtrace-h-7.jsonl");
        assert_eq!(expand("100%%-%x", 1, "h", "0"), "100%-%x");
    }

    #[test]
    fn substituted_values_stay_in_one_file_name() {
        // (pattern, host, rank, name)
        let cases = [
            ("o/t-%r-%h", "h/../x", "../../x", "o/t-______x-h____x"),
            ("o/%r/t", "h", "..", "o/__/t"),
            ("t-%r.jsonl", "h", "...", "t-__..jsonl"),
            ("t-%r-%h", "a\nb\x1b", "", "t-_-a_b_"),
            ("t-%r", "h", "rank-3.a", "t-rank-3.a"),
        ];
        for (pattern, host, rank, name) in cases {
            assert_eq!(expand(pattern, 1, host, rank), name, "{pattern} {rank:?}");
        }
    }

    #[test]
    fn numbered_names_keep_the_extension() {
        assert_eq!(numbered("a/b.jsonl", 0), "a/b.jsonl");
        assert_eq!(numbered("a/b.jsonl", 2), "a/b.2.jsonl");
        assert_eq!(numbered("trace", 1), "trace.1");
    }
}
