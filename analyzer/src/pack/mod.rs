//! One file for a bug report: a run's traces, PyTorch snapshots and `torch-*.json` in a
//! zstd-compressed tar. Every view reads a pack as the directory it came from: it is
//! unpacked into a private temporary directory, removed when vramtrace ends.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use vramtrace_schema::reader::compressed;

pub mod redact;

/// The most members a pack may hold: a run of 128 nodes x 8 GPUs with a snapshot each is
/// about 2,000; a hostile pack of millions of empty members is refused.
const MAX_MEMBERS: usize = 100_000;

/// Directories unpacked for this process, removed by [`cleanup_at_exit`].
static UNPACKED: Mutex<Vec<tempfile::TempDir>> = Mutex::new(Vec::new());
/// Set by the signal's handler, before the cleanup thread takes [`UNPACKED`]: the main
/// thread, which could take the lock first (a mutex lets the thread that just freed it
/// take it again ahead of the one it woke, and the cleanup thread may not have run yet),
/// then waits for the end instead of going on or exiting.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// [`UNPACKED`], for the main thread: after a signal, it never returns (the cleanup
/// thread ends the process), so nothing is made, read or exited with after it.
fn lock_unpacked() -> MutexGuard<'static, Vec<tempfile::TempDir>> {
    let guard = UNPACKED.lock().unwrap_or_else(|e| e.into_inner());
    if SIGNALLED.load(Ordering::SeqCst) {
        drop(guard);
        loop {
            std::thread::park();
        }
    }
    guard
}

/// Each unpacked directory with the pack it came from, for messages.
static SOURCES: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

/// `message` with every unpacked directory named as the pack it came from
/// (`run.vtpack/vramtrace-h-1.jsonl:12: ...`): the directory is gone once vramtrace ends.
pub fn named_as_packs(message: &str) -> String {
    let sources = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
    sources.iter().fold(message.to_string(), |m, (dir, pack)| {
        m.replace(&dir.display().to_string(), &pack.display().to_string())
    })
}

/// `path` as it is shown: a file unpacked from a pack as `PACK/MEMBER`, any other as it is.
pub fn shown(path: &Path) -> PathBuf {
    let sources = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
    sources
        .iter()
        .find_map(|(dir, pack)| path.strip_prefix(dir).ok().map(|m| pack.join(m)))
        .unwrap_or_else(|| path.to_path_buf())
}

/// What a pack holds, by kind.
#[derive(Debug, Default)]
pub struct Packed {
    pub traces: usize,
    pub snapshots: usize,
    pub torch_files: usize,
    /// Inputs not packed, each with why: under `--redact`, a file named like a snapshot
    /// that does not read as one, or whose name in the pack is another member's.
    pub left_out: Vec<String>,
    pub bytes_in: u64,
}

fn is_snapshot_name(name: &str) -> bool {
    name.ends_with(".pickle") || name.ends_with(".pkl")
}

fn is_torch_json(name: &str) -> bool {
    name.starts_with("torch-") && name.ends_with(".json")
}

fn is_trace_name(name: &str) -> bool {
    name.ends_with(".jsonl")
}

/// The files of a run that go into a pack: those named, and in directories the traces,
/// snapshots and `torch-*.json`; each with the name it gets in the pack.
fn members(inputs: &[PathBuf]) -> Result<Vec<(PathBuf, String)>, String> {
    let mut out = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(|e| format!("{}: {e}", input.display()))?;
        let files: Vec<PathBuf> = if meta.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(input)
                .map_err(|e| format!("{}: cannot read directory: {e}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            v.sort();
            v
        } else {
            vec![input.clone()]
        };
        for file in files {
            // Only regular files, never what a symlink or FIFO stands for.
            if !std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
                continue;
            }
            let name = compressed::inner_name(&file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if is_trace_name(&name) || is_snapshot_name(&name) || is_torch_json(&name) {
                out.push((file, name));
            }
        }
    }
    if out.is_empty() {
        return Err("nothing to pack: no traces, snapshots or torch-*.json".into());
    }
    // A pack is one flat directory: two files of one name (two runs' directories that both
    // hold `vramtrace-h-1.jsonl`) would overwrite each other.
    let mut seen: std::collections::HashMap<&str, &Path> = Default::default();
    for (path, name) in &out {
        if let Some(first) = seen.insert(name.as_str(), path.as_path()) {
            return Err(format!(
                "{} and {} would both be packed as {name}: pack them separately",
                first.display(),
                path.display()
            ));
        }
    }
    Ok(out)
}

/// Writes the pack of `inputs` to `out` (created as every output is: 0600, never through a
/// link, over an existing file only with `replace`).
pub fn write(
    out: &Path,
    inputs: &[PathBuf],
    redact: bool,
    replace: bool,
) -> Result<Packed, String> {
    let members = members(inputs)?;
    let file = crate::output_file::create(out, replace)?;
    let encoder = zstd::stream::write::Encoder::new(BufWriter::new(file), 3)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let mut tar = tar::Builder::new(encoder);
    let mut packed = Packed::default();
    let mut redactor = redact::Redactor::default();
    if redact {
        // Hosts first: their names are in the file names of members packed before them.
        for (path, name) in &members {
            if is_trace_name(name) {
                let header = crate::regular_file::open_regular(path)
                    .ok()
                    .and_then(|f| compressed::decompressed(f).ok())
                    .and_then(|c| vramtrace_schema::reader::TraceReader::new(path, c).ok());
                if let Some(r) = header {
                    redactor.host(&r.header().host);
                }
            } else if let Some((Some(host), _)) = crate::snapshot::names::writer(name) {
                // A hook's snapshot names its host even where no trace of it is packed.
                redactor.host(&host);
            }
        }
    }
    // Names once renamed: two members must never end up with one name (a file of a host
    // already called `host-1`, a redacted copy packed beside its original).
    let mut written = std::collections::HashSet::new();
    for (path, name) in members {
        let name = if redact {
            redactor.file_name(&name)
        } else {
            name
        };
        // Before any reading: the name alone decides.
        if !written.insert(name.clone()) {
            packed.left_out.push(format!(
                "{}: its name in the pack, {name}, is another member's",
                path.display()
            ));
            continue;
        }
        let mut content = Vec::new();
        compressed::open(&path)
            .and_then(|mut r| r.read_to_end(&mut content))
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        packed.bytes_in += content.len() as u64;
        if redact {
            content = if is_trace_name(&name) {
                redactor.trace(&content)
            } else if is_snapshot_name(&name) {
                match redact::snapshot(&content) {
                    Ok(c) => c,
                    Err(e) => {
                        // Not a snapshot vramtrace reads: its paths cannot be taken out.
                        packed.left_out.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                }
            } else {
                redactor.json(&content)
            };
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o600);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, &name, content.as_slice())
            .map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
        match () {
            _ if is_trace_name(&name) => packed.traces += 1,
            _ if is_snapshot_name(&name) => packed.snapshots += 1,
            _ => packed.torch_files += 1,
        }
    }
    let encoder = tar
        .into_inner()
        .map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    encoder
        .finish()
        .and_then(|mut w| w.flush())
        .map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    if packed.traces + packed.snapshots + packed.torch_files == 0 {
        // Every input was left out: an empty pack would read as no run at all. The file
        // is the one just created here.
        let _ = std::fs::remove_file(out);
        let why = packed.left_out.join("; ");
        return Err(format!("nothing packed: every input was left out ({why})"));
    }
    Ok(packed)
}

/// Whether `path` is a pack: a tar, plain or compressed (its first block says `ustar`).
pub fn is_pack(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    let Ok(input) = compressed::open(path) else {
        return false;
    };
    let mut first = [0u8; 512];
    let mut reader = BufReader::new(input.take(512));
    let mut got = 0;
    while got < first.len() {
        match reader.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(buf) => {
                let n = buf.len().min(first.len() - got);
                first[got..got + n].copy_from_slice(&buf[..n]);
                reader.consume(n);
                got += n;
            }
        }
    }
    got == 512 && &first[257..262] == b"ustar"
}

/// Unpacks `path` into a private temporary directory (0700) kept until [`cleanup_at_exit`], and
/// returns it. Members are plain files named without any directory part; anything else
/// (links, devices, `../` names) is skipped.
pub fn unpack(path: &Path) -> Result<PathBuf, String> {
    remove_on_signal();
    let make = || {
        tempfile::Builder::new()
            .prefix("vramtrace-pack-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
    };
    unpack_into(path, make, room_in(&std::env::temp_dir()))
}

/// Bytes a pack may unpack into `dir`'s file system: half of what is free there, so that
/// a small pack that expands hugely (a decompression bomb) stops with an error instead of
/// filling the disk. (Free space less a tenth of the file system refused every pack on a
/// disk more than 90% full, however small the pack.)
fn room_in(dir: &Path) -> u64 {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return 0;
    };
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return 0;
    }
    let block = s.f_frsize as u64;
    (s.f_bavail as u64).saturating_mul(block) / 2
}

/// Unpacks `path` into the directory `make` creates.
fn unpack_into(
    path: &Path,
    make: impl FnOnce() -> std::io::Result<tempfile::TempDir>,
    room: u64,
) -> Result<PathBuf, String> {
    // Made and registered under the lock that a signal's cleanup takes, so that no moment
    // passes when the directory exists unknown to it.
    let kept = {
        let mut unpacked = lock_unpacked();
        let dir = make().map_err(|e| format!("{}: cannot unpack: {e}", path.display()))?;
        let kept = dir.path().to_path_buf();
        unpacked.push(dir);
        kept
    };
    let unpacked = fill(path, &kept, room);
    match &unpacked {
        Ok(()) => SOURCES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((kept.clone(), path.to_path_buf())),
        // Dropping the directory removes it.
        Err(_) => lock_unpacked().retain(|d| d.path() != kept),
    }
    unpacked.map(|()| kept)
}

/// Writes the members of the pack at `path` into `dir`.
fn fill(path: &Path, dir: &Path, room: u64) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: cannot unpack: {e}", path.display());
    let mut written: u64 = 0;
    let mut archive = tar::Archive::new(compressed::open(path).map_err(err)?);
    let mut count = 0;
    for entry in archive.entries().map_err(err)? {
        let mut entry = entry.map_err(err)?;
        count += 1;
        if count > MAX_MEMBERS {
            return Err(format!(
                "{}: more than {MAX_MEMBERS} members: not a vramtrace pack",
                path.display()
            ));
        }
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = entry.path().map_err(err)?.into_owned();
        let Some(base) = name.file_name().filter(|b| Path::new(b) == name.as_path()) else {
            continue;
        };
        written = written.saturating_add(entry.header().size().unwrap_or(u64::MAX));
        if written > room {
            return Err(format!(
                "{}: unpacks to more than the {} free for it in {}: not read",
                path.display(),
                crate::units::bytes(room),
                std::env::temp_dir().display()
            ));
        }
        let target = dir.join(base);
        // Held while the member is created: a signal's cleanup waits for it rather than
        // racing it (a file created after the removal would keep the directory). Not
        // while it is written: a file removed meanwhile takes the rest of its bytes
        // harmlessly, and Ctrl-C need not wait for a large member.
        let creating = lock_unpacked();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&target)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => format!(
                    "{}: holds {} twice: not a pack vramtrace wrote",
                    path.display(),
                    base.to_string_lossy()
                ),
                _ => err(e),
            })?;
        drop(creating);
        // A member longer than its header said is cut there.
        let size = entry.header().size().unwrap_or(0);
        std::io::copy(&mut (&mut entry).take(size), &mut file).map_err(err)?;
    }
    Ok(())
}

/// Has Ctrl-C, `kill` or a closed terminal remove the unpacked directories before vramtrace
/// dies of the signal: otherwise a reading interrupted midway leaves them in /tmp.
fn remove_on_signal() {
    static WATCHING: std::sync::Once = std::sync::Once::new();
    WATCHING.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        // A signal ignored when vramtrace started (`nohup` ignores SIGHUP) stays ignored.
        let watched: Vec<_> = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
            .into_iter()
            .filter(|&s| !ignored(s))
            .collect();
        let Ok(mut signals) = signal_hook::iterator::Signals::new(&watched) else {
            return;
        };
        for &s in &watched {
            // Set in the handler itself: the main thread may reach its last lock before
            // the cleanup thread has run. SAFETY: an atomic store is async-signal-safe.
            let _ = unsafe {
                signal_hook::low_level::register(s, || SIGNALLED.store(true, Ordering::SeqCst))
            };
        }
        let started = std::thread::Builder::new()
            .name("vramtrace-pack-cleanup".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    // The lock held until the process is gone: the main thread, which
                    // finds the files removed and would exit with an error (status 2)
                    // first, waits at its next lock instead (the handler said so).
                    let mut unpacked = UNPACKED.lock().unwrap_or_else(|e| e.into_inner());
                    unpacked.clear();
                    // Ends as the signal would have ended vramtrace, status included.
                    let _ = signal_hook::low_level::emulate_default_handler(signal);
                    // SAFETY: ending the process; only reached if the default action
                    // did not end it.
                    unsafe { libc::_exit(128 + signal) };
                }
            });
        if started.is_err() {
            // No thread to act on them: the signals end vramtrace as they would have
            // (what was unpacked stays), rather than being swallowed.
            for &s in &watched {
                // SAFETY: restoring the default action.
                unsafe { libc::signal(s, libc::SIG_DFL) };
            }
        }
    });
}

/// Whether `signal` is ignored now.
fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: sigaction with no new action only reads the current one into `old`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let read = unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } == 0;
    read && old.sa_sigaction == libc::SIG_IGN
}

/// Removes what [`unpack`] made, and holds the lock until the process has exited (called
/// just before vramtrace exits): a signal from here on is too late to change the exit
/// status, and its cleanup thread waits rather than race the exit.
pub fn cleanup_at_exit() {
    let mut unpacked = lock_unpacked();
    unpacked.clear();
    std::mem::forget(unpacked);
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_pack_is_unpacked_into_a_directory_only_its_owner_can_list() {
        let run = tempfile::tempdir().unwrap();
        std::fs::write(run.path().join("vramtrace-h-1.jsonl"), b"{}\n").unwrap();
        let pack = run.path().join("run.vtpack");
        super::write(&pack, &[run.path().to_path_buf()], false, false).unwrap();
        let dir = super::unpack(&pack).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        super::lock_unpacked().clear();
        assert_eq!(mode, 0o700, "{mode:o}");
        assert!(!dir.exists());
    }

    #[test]
    fn two_files_of_one_name_are_refused_naming_both() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for d in [&a, &b] {
            std::fs::write(d.path().join("vramtrace-h-1.jsonl"), b"{}\n").unwrap();
        }
        let pack = a.path().join("run.vtpack");
        let inputs = [a.path().to_path_buf(), b.path().to_path_buf()];
        let err = super::write(&pack, &inputs, false, false).unwrap_err();
        assert!(
            err.contains("both be packed as vramtrace-h-1.jsonl"),
            "{err}"
        );
        assert!(err.contains(&b.path().display().to_string()), "{err}");
        assert!(!pack.exists(), "no pack is left behind");
    }

    #[test]
    fn a_pack_that_unpacks_past_the_room_left_is_refused() {
        let run = tempfile::tempdir().unwrap();
        // 1 MiB of zeros: a few hundred bytes once compressed.
        std::fs::write(run.path().join("vramtrace-h-1.jsonl"), vec![0u8; 1 << 20]).unwrap();
        let pack = run.path().join("run.vtpack");
        super::write(&pack, &[run.path().to_path_buf()], false, false).unwrap();
        assert!(std::fs::metadata(&pack).unwrap().len() < 64 << 10);
        let err = super::unpack_into(&pack, tempfile::tempdir, 512 << 10).unwrap_err();
        assert!(err.contains("unpacks to more than"), "{err}");
        assert!(super::unpack_into(&pack, tempfile::tempdir, 2 << 20).is_ok());
    }
}
