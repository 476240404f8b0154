//! A run: every process's replayed model, on one common clock.

use crate::input;
use crate::model::ProcessModel;
use std::path::PathBuf;
use vramtrace_schema::reader::{TraceError, TraceReader};
use vramtrace_schema::Event;

pub struct Run {
    pub processes: Vec<ProcessModel>,
    /// Files that could not be read at all (no valid header).
    pub unreadable: Vec<TraceError>,
    /// CLOCK_MONOTONIC of the earliest process start: time 0 of the run.
    pub start_mono_ns: u64,
}

impl Run {
    /// Replays every trace under `paths`; `each(process_index, event, model)` sees every event.
    pub fn load(
        paths: &[PathBuf],
        mut each: impl FnMut(usize, &Event, &ProcessModel),
    ) -> Result<Run, String> {
        let files = input::trace_files(paths)?;
        let mut processes = Vec::new();
        let mut unreadable = Vec::new();
        for file in files {
            match TraceReader::open(&file) {
                Ok(reader) => {
                    let index = processes.len();
                    processes.push(ProcessModel::replay(reader, |e, m| each(index, e, m)));
                }
                Err(e) => unreadable.push(e),
            }
        }
        let start_mono_ns = processes
            .iter()
            .map(|p| p.header.start_mono_ns)
            .min()
            .unwrap_or(0);
        Ok(Run {
            processes,
            unreadable,
            start_mono_ns,
        })
    }

    /// A process-relative time as time since the run's start.
    pub fn run_time(&self, process: &ProcessModel, t: u64) -> u64 {
        (process.header.start_mono_ns + t).saturating_sub(self.start_mono_ns)
    }

    /// Problems met while reading, one line each, for stderr.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .unreadable
            .iter()
            .map(|e| format!("error: {e}"))
            .collect();
        for p in &self.processes {
            if let Some(e) = &p.error {
                out.push(format!("error: {e} (events before it are used)"));
            }
            if let Some(line) = p.notes.truncated_line {
                out.push(format!(
                    "note: {}:{line}: the last line was cut off (the process was killed); events before it are used",
                    p.path.display()
                ));
            }
            if p.notes.unknown_apis > 0 || p.notes.unknown_records > 0 {
                out.push(format!(
                    "note: {}: skipped {} events of unknown APIs and {} unknown records (written by a newer vramtrace)",
                    p.path.display(),
                    p.notes.unknown_apis,
                    p.notes.unknown_records
                ));
            }
        }
        out
    }
}
