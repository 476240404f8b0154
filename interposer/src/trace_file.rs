//! A process's trace file: its name, its creation and its header line.

use crate::{clock, output, settings};
use vramtrace_schema::{Header, Settings, FORMAT_NAME, FORMAT_VERSION};

/// Creates this process's trace file and writes its header.
pub fn open() -> Result<crate::trace_fd::TraceFd, String> {
    let header = header();
    let rank = header.env.get("RANK").map(String::as_str).unwrap_or("0");
    let path = output::expand(&settings::get().output, header.pid, &header.host, rank);
    let (fd, created) = output::create(&path)?;
    // Taken over (and checked) before the first write: the program may have taken the
    // number back already.
    let mut file = crate::trace_fd::TraceFd::new(fd, &created);
    let mut line = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    line.push(b'\n');
    let fd = file
        .checked()
        .ok_or_else(|| format!("cannot write the trace {path}: it is gone or replaced"))?;
    output::write_all(fd, &line).map_err(|e| format!("cannot write the trace {path}: {e}"))?;
    file.wrote(line.len());
    Ok(file)
}

/// The most bytes of `/proc/self/cmdline` read: the kernel's usual limit on arguments.
const CMDLINE_MAX: usize = 2 << 20;

fn header() -> Header {
    let s = settings::get();
    // Read on the writer thread, while the program may reuse low descriptors; the thread's
    // own file, because the process's is empty once `main` has called `pthread_exit`.
    let argv = crate::own_files::read("/proc/thread-self/cmdline", CMDLINE_MAX)
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let env = s.env.iter().cloned().collect();
    Header {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        pid: std::process::id(),
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        host: hostname(),
        argv,
        exe: crate::stack::modules::exe().to_string(),
        start_unix_ns: clock::origin_unix_ns(),
        start_mono_ns: clock::origin_mono_ns(),
        env,
        settings: Settings {
            output: s.output.clone(),
            children: s.children,
            flush_ms: s.flush_ms,
            stack_depth: s.stack_depth as u32,
            python: s.python,
        },
        interposer: env!("CARGO_PKG_VERSION").into(),
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
