//! What every view's command does alike: load the run, report reading problems on stderr,
//! and exit 1 when a trace could not be read completely (the figures still cover what was).

use crate::replay::{LoadOptions, Run, Step};
use std::path::{Path, PathBuf};

/// Loads the run and prints its problems. `Ok(Err(code))`: nothing readable, exit now.
pub fn load(
    paths: &[PathBuf],
    options: LoadOptions,
    each: impl FnMut(&Step),
) -> Result<Result<Run, i32>, String> {
    let run = Run::load(paths, options, each)?;
    for p in run.problems() {
        let p = crate::pack::named_as_packs(&p);
        eprintln!("vramtrace: {}", crate::render::escape::terminal(&p));
    }
    if run.processes.is_empty() {
        eprintln!("vramtrace: no readable trace");
        return Ok(Err(1));
    }
    Ok(Ok(run))
}

/// Says so on stderr when `--at` lies past the run's last event: what is shown is the
/// state at the end, not at that moment.
pub fn warn_past_end(run: &Run, at: Option<u64>) {
    if let Some(at) = at.filter(|&at| at > run.last_read) {
        eprintln!(
            "vramtrace: warning: --at {} is past the run's end ({}): showing the state at its end",
            crate::units::seconds(at),
            crate::units::seconds(run.last_read)
        );
    }
}

/// Says so on stderr when `--layer allocated` was asked of a run without tensors: what is
/// shown is the reserved layer (as each view's output says too).
pub fn warn_no_tensors(run: &Run, asked: Option<crate::views::layer::Layer>) {
    use crate::views::layer::{has_tensors, Layer};
    if asked == Some(Layer::Allocated) && !has_tensors(run) {
        eprintln!(
            "vramtrace: note: --layer allocated: no allocator annotated its blocks and no PyTorch snapshot gave tensors: showing the reserved layer"
        );
    }
}

/// The exit status for a view of `run`.
pub fn status(run: &Run) -> i32 {
    if run.complete() {
        0
    } else {
        1
    }
}

/// Fails at once when `path` (not `-`) cannot be written, before a long load.
pub fn check_output(path: &Path, replace: bool) -> Result<(), String> {
    match crate::output_file::refusal(path, replace) {
        Some(why) if path != Path::new("-") => Err(why),
        _ => Ok(()),
    }
}

/// Writes `content` to a new file `path` (see [`crate::output_file`]; `replace`: the
/// user's `--force`), or to stdout for `-`.
pub fn write(path: &Path, content: &str, replace: bool) -> Result<(), String> {
    use std::io::Write;
    if path == Path::new("-") {
        return print(content);
    }
    crate::output_file::create(path, replace)?
        .write_all(content.as_bytes())
        .map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

/// Prints to stdout; a closed pipe (`| head`) ends the output quietly.
pub fn print(content: &str) -> Result<(), String> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(content.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// Prints a text view that may hold colour ([`crate::render::style`]): kept on a terminal,
/// dropped in pipes, files and under `NO_COLOR`.
pub fn print_styled(content: &str) -> Result<(), String> {
    use std::io::Write;
    let mut out = anstream::AutoStream::auto(std::io::stdout().lock());
    match out.write_all(content.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// Parses `--at` and `--resolution` values.
pub fn duration(s: &str) -> Result<u64, String> {
    crate::units::parse_duration(s)
}

/// Prints a JSON document, pretty, with a final newline.
pub fn print_json(doc: &serde_json::Value) -> Result<(), String> {
    let mut text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    text.push('\n');
    print(&text)
}

/// `first`, then what the environment variable `var` holds, `:`-separated (a search path).
pub fn prepend(var: &str, first: &str) -> String {
    match std::env::var(var) {
        Ok(rest) if !rest.is_empty() => format!("{first}:{rest}"),
        _ => first.to_string(),
    }
}
