//! Which run a trace belongs to, so that two runs written into one directory are never
//! summed as if their processes had shared the card.
//!
//! `vramtrace run` gives its processes `VRAMTRACE_RUN_ID`: the launcher's job id where
//! there is one (`TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID`, so that the nodes of one job stay
//! one run), a fresh id otherwise. The interposer records it with the other listed
//! variables. A trace written without `vramtrace run` falls back to those job ids.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use vramtrace_schema::reader::{compressed, TraceReader};
use vramtrace_schema::Header;

static CHOSEN: OnceLock<Option<String>> = OnceLock::new();

/// Sets the run `--run` asked for (once, at start).
pub fn choose(run: Option<String>) {
    let _ = CHOSEN.set(run);
}

/// The run id recorded in a trace's header, if any.
pub fn of_header(header: &Header) -> Option<String> {
    if let Some(id) = header
        .env
        .get("VRAMTRACE_RUN_ID")
        .filter(|id| !id.is_empty())
    {
        return Some(id.clone());
    }
    job_id(|k| header.env.get(k).cloned())
}

/// The launcher's id of this job step, from its variables (`get`): torchrun's run id
/// (not its default, `none`, which every job shares), or Slurm's job and step (the
/// nodes of one `srun` share both; two steps of one job are two runs). Without a step,
/// a job's id alone would sum its sequential runs: none then.
fn job_id(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    let set = |k: &str| get(k).filter(|v| !v.is_empty());
    if let Some(id) = set("TORCHELASTIC_RUN_ID").filter(|id| id != "none") {
        return Some(id);
    }
    Some(format!(
        "{}.{}",
        set("SLURM_JOB_ID")?,
        set("SLURM_STEP_ID")?
    ))
}

/// The header of the trace at `path`, opened as a regular file only (a FIFO with a
/// trace's name would block the open forever).
fn header_of(path: &Path) -> Result<TraceReader<Box<dyn std::io::Read + Send>>, String> {
    let file = crate::regular_file::open_regular(path)?;
    let content = compressed::decompressed(file).map_err(|e| e.to_string())?;
    TraceReader::new(path, content).map_err(|e| e.to_string())
}

/// The id `vramtrace run` gives the processes it starts.
pub fn for_new_run() -> String {
    job_id(|k| std::env::var(k).ok())
        .unwrap_or_else(|| format!("{}-{}", local_stamp(), std::process::id()))
}

/// The local date and time, `20261202-143005`.
pub fn local_stamp() -> String {
    // SAFETY: time and localtime_r with valid pointers.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }
}

/// The name shown, and taken by `--run`, for traces that record no run id (written
/// without `vramtrace run` and outside a launcher's job).
pub const UNNAMED: &str = "unnamed";

/// One run found in a directory.
struct Found {
    id: Option<String>,
    start_unix_ns: u64,
    files: Vec<PathBuf>,
}

/// Groups `files` (the traces of directory `dir`) by run. One run: all of them. Several:
/// the one `--run` chose, else the newest, saying so on stderr.
pub fn select(dir: &Path, files: Vec<PathBuf>) -> Result<Vec<PathBuf>, String> {
    let mut runs: Vec<Found> = Vec::new();
    // Files whose header cannot be read belong to no run that can be told: they go with
    // the run shown, whose full read reports their error with file and line, rather than
    // being taken for a run of their own (and hidden behind a newer one).
    let mut unreadable: Vec<PathBuf> = Vec::new();
    for file in files {
        let (id, start) = match header_of(&file) {
            Ok(r) => (of_header(r.header()), r.header().start_unix_ns),
            Err(_) => {
                unreadable.push(file);
                continue;
            }
        };
        match runs.iter_mut().find(|r| r.id == id) {
            Some(run) => {
                run.start_unix_ns = run.start_unix_ns.min(start);
                run.files.push(file);
            }
            None => runs.push(Found {
                id,
                start_unix_ns: start,
                files: vec![file],
            }),
        }
    }
    let with_unreadable = |mut files: Vec<PathBuf>| {
        files.extend(unreadable.iter().cloned());
        files.sort();
        files
    };
    let chosen = CHOSEN.get().cloned().flatten();
    if let Some(want) = &chosen {
        // A recorded id wins over the name of the id-less run.
        let found = match runs.iter().position(|r| r.id.as_deref() == Some(want)) {
            Some(i) => Some(i),
            None if want == UNNAMED => runs.iter().position(|r| r.id.is_none()),
            None => None,
        };
        return match found.map(|i| runs.swap_remove(i)) {
            Some(run) => Ok(with_unreadable(run.files)),
            None => Err(format!("{}: no traces of run {want:?}", dir.display())),
        };
    }
    if runs.len() <= 1 {
        return Ok(with_unreadable(
            runs.pop().map(|r| r.files).unwrap_or_default(),
        ));
    }
    runs.sort_by_key(|r| r.start_unix_ns);
    let list: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{} ({}, started {})",
                r.id.as_deref().unwrap_or(UNNAMED),
                crate::units::count(r.files.len() as u64, "process"),
                crate::units::wall(r.start_unix_ns)
            )
        })
        .collect();
    let newest = runs.pop().expect("several runs");
    eprintln!(
        "vramtrace: {} holds {} runs: {}; showing the newest, {}. Choose one with --run ID ({UNNAMED}: the traces that record no run id)",
        dir.display(),
        runs.len() + 1,
        list.join(", "),
        newest.id.as_deref().unwrap_or(UNNAMED)
    );
    Ok(with_unreadable(newest.files))
}

/// Warns when `dir` already holds traces of a run other than `id`.
pub fn warn_if_other_run(dir: &Path, id: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let others = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter(|p| {
            header_of(p)
                .map(|r| of_header(r.header()).as_deref() != Some(id))
                .unwrap_or(true)
        })
        .count();
    if others > 0 {
        eprintln!(
            "vramtrace: warning: {} already holds {} of another run; the views show one run at a time (the newest, or --run ID): use a new directory to keep runs apart",
            dir.display(),
            crate::units::count(others as u64, "trace"),
        );
    }
}
