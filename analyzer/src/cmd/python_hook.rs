//! The PyTorch adapter of `vramtrace run`: a `sitecustomize` startup hook, shipped inside
//! the binary and written into a private directory put first on `PYTHONPATH` when the
//! traced command looks like Python. See `analyzer/python/vramtrace_torch/sitecustomize.py`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The hook's source.
pub const SITECUSTOMIZE: &str = include_str!("../../python/vramtrace_torch/sitecustomize.py");

/// Launchers that run Python (besides `python*` itself and scripts with a Python shebang).
const PYTHON_LAUNCHERS: &[&str] = &[
    "torchrun",
    "accelerate",
    "deepspeed",
    "pytest",
    "ipython",
    "jupyter",
    "py.test",
];

/// The directory holding the hook; removed when dropped (after the command has ended).
#[derive(Debug)]
pub struct PythonHook {
    pub dir: PathBuf,
}

impl Drop for PythonHook {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `argv` runs Python: `python`, `python3.11`, a known launcher, or a script whose
/// `#!` line names python.
pub fn looks_like_python(argv: &[String]) -> bool {
    let Some(first) = argv.first() else {
        return false;
    };
    let base = Path::new(first)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    if base.starts_with("python") || base.starts_with("pypy") {
        return true;
    }
    if PYTHON_LAUNCHERS.contains(&base.as_str()) {
        return true;
    }
    find_in_path(first).is_some_and(|p| shebang_names_python(&p))
}

fn find_in_path(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

fn shebang_names_python(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let head = &head[..n];
    if !head.starts_with(b"#!") {
        return false;
    }
    let line = head.split(|&c| c == b'\n').next().unwrap_or_default();
    String::from_utf8_lossy(line).contains("python")
}

/// Writes the hook into a fresh private directory (mode 0700 under the temporary directory).
pub fn write_hook() -> Result<PythonHook, String> {
    let template = std::env::temp_dir().join("vramtrace-python-XXXXXX");
    let c = CString::new(template.as_os_str().as_bytes())
        .map_err(|_| "temporary directory path holds a NUL byte".to_string())?;
    let mut buf = c.into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated buffer, as mkdtemp wants.
    let p = unsafe { libc::mkdtemp(buf.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(format!(
            "cannot create a directory in {}: {}",
            std::env::temp_dir().display(),
            std::io::Error::last_os_error()
        ));
    }
    buf.pop();
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&buf));
    let hook = PythonHook { dir };
    let path = hook.dir.join("sitecustomize.py");
    crate::output_file::create(&path, false).and_then(|mut f| {
        use std::io::Write;
        f.write_all(SITECUSTOMIZE.as_bytes())
            .map_err(|e| format!("{}: cannot write: {e}", path.display()))
    })?;
    Ok(hook)
}

/// For `vramtrace run`: when `argv` looks like Python, writes the hook and puts its
/// directory first on the command's `PYTHONPATH`. Problems are one warning; the run goes on.
pub fn install(cmd: &mut Command, argv: &[String]) -> Option<PythonHook> {
    if !looks_like_python(argv) {
        return None;
    }
    match write_hook() {
        Ok(hook) => {
            let dir = hook.dir.to_string_lossy();
            cmd.env("PYTHONPATH", super::common::prepend("PYTHONPATH", &dir));
            Some(hook)
        }
        Err(e) => {
            eprintln!("vramtrace: warning: no PyTorch hook: {e}");
            None
        }
    }
}
