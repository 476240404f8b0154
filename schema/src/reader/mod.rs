//! Streaming reader: one line at a time, memory bounded by the longest line allowed and
//! the reorder window, never by the length of the trace.

use crate::event::{End, Event};
use crate::header::{Header, FORMAT_NAME, FORMAT_VERSION};
use crate::stacks::StackTable;
use serde::Deserialize;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

mod ahead;
mod background;
pub mod compressed;
mod lines;
mod pooled;

pub use pooled::ParsePool;

use ahead::Ahead;
use background::Background;
use lines::{Item, LineRead, Lines};
use pooled::Pooled;

/// Longest line a reader accepts. Records are a few hundred bytes; anything longer is not
/// something the interposer wrote.
pub const MAX_LINE: usize = 1 << 20;

/// Device ordinals a trace may name: -1 (none) and `0..MAX_DEVICES`. CUDA numbers the
/// devices a process sees from 0, and no machine has thousands; a larger `dev` is not
/// something the interposer wrote, and views that lay devices out by ordinal (the
/// memory-viz export's per-device lists) must not size themselves by it.
pub const MAX_DEVICES: i32 = 4096;

/// Events are written in time order per flush; a thread preempted between its timestamp
/// and its queue push can land a few events late. Readers restore the order within this
/// many events (fewer where a run reads many traces at once: [`TraceReader::set_window`]).
pub const REORDER_WINDOW: usize = 1 << 16;

/// The smallest window a reader may be given.
pub const MIN_WINDOW: usize = 1 << 10;

/// An error that names the file, the line and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub path: PathBuf,
    /// 1-based line number; 0 when the file could not be read at all.
    pub line: u64,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

/// What the reader noticed besides events.
#[derive(Debug, Default, Clone)]
pub struct ReadNotes {
    /// The last line had no newline: the process was killed mid-write. It was dropped.
    pub truncated_line: Option<u64>,
    /// Lines with an API this reader does not know (written by a newer interposer).
    pub unknown_apis: u64,
    /// Lines that are neither events nor known records (newer optional records).
    pub unknown_records: u64,
    /// The end record, if the process ended normally.
    pub end: Option<End>,
    /// Calls the interposer could not record (the sum of the `lost` records).
    pub lost_calls: u64,
    /// Events that came later in the file than the reorder window reaches: handed out
    /// after events timed after them, at their own time.
    pub late_events: u64,
}

/// Reads a trace file event by event.
pub struct TraceReader<R: Read = File> {
    path: PathBuf,
    source: Source<R>,
    header: Header,
    pub notes: ReadNotes,
    /// Frames and stack nodes read so far (they precede the events that use them).
    pub stacks: StackTable,
    /// Marker names by id (`vramtrace_marker` events carry the id in `handle`).
    pub names: std::collections::HashMap<u64, String>,
    /// Events read ahead, handed out earliest first.
    pending: Ahead,
    /// Events read ahead at most.
    window: usize,
    /// The latest time handed out: an event before it came past the window.
    handed_out: Option<u64>,
    done: bool,
    deferred: Option<TraceError>,
}

/// Where the lines come from: parsed here, by a thread of their own, or by a pool's.
enum Source<R> {
    Inline(Lines<R>),
    Background(Background),
    Pooled(Pooled<R>),
    /// The file is read to its end: its buffers and thread are given back.
    Finished,
}

impl TraceReader<Box<dyn Read + Send>> {
    /// Opens a trace (plain, gzip or zstd) and reads its header.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = compressed::open(path).map_err(|e| TraceError {
            path: path.to_path_buf(),
            line: 0,
            message: format!("cannot open: {e}"),
        })?;
        TraceReader::new(path, file)
    }
}

impl<R: Read + Send + 'static> TraceReader<R> {
    /// As [`TraceReader::new`], with the lines after the header parsed on a thread of
    /// their own while there are CPUs for it (in line otherwise): the same events, records
    /// and errors in the same order.
    pub fn new_parallel(path: &Path, input: R) -> Result<Self, TraceError> {
        let mut lines = Lines::new(path.to_path_buf(), input);
        let header = read_header(&mut lines)?;
        let source = match Background::start(lines) {
            Ok(b) => Source::Background(b),
            Err(lines) => Source::Inline(lines),
        };
        Ok(TraceReader::with(path, header, source))
    }

    /// As [`TraceReader::new`], with the lines after the header parsed a batch ahead by
    /// `pool`'s threads, which every reader made with it shares: for a run of more traces
    /// than CPUs. The same events, records and errors in the same order.
    pub fn new_pooled(path: &Path, input: R, pool: &ParsePool) -> Result<Self, TraceError> {
        let mut lines = Lines::new(path.to_path_buf(), input);
        let header = read_header(&mut lines)?;
        let source = Source::Pooled(Pooled::new(lines, pool));
        let mut reader = TraceReader::with(path, header, source);
        reader.set_window(REORDER_WINDOW);
        Ok(reader)
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the header from `input`; `path` is only used in messages.
    pub fn new(path: &Path, input: R) -> Result<Self, TraceError> {
        let mut lines = Lines::new(path.to_path_buf(), input);
        let header = read_header(&mut lines)?;
        Ok(TraceReader::with(path, header, Source::Inline(lines)))
    }

    fn with(path: &Path, header: Header, source: Source<R>) -> Self {
        TraceReader {
            path: path.to_path_buf(),
            source,
            header,
            notes: ReadNotes::default(),
            stacks: StackTable::default(),
            names: Default::default(),
            pending: Ahead::default(),
            window: REORDER_WINDOW,
            handed_out: None,
            done: false,
            deferred: None,
        }
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next event in the file's order, or `None` at the end; other records go
    /// where they belong.
    fn next_raw(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            let item = match &mut self.source {
                Source::Inline(lines) => lines.item()?,
                Source::Background(b) => b.item()?,
                Source::Pooled(p) => p.item()?,
                Source::Finished => None,
            };
            match item {
                None => return Ok(None),
                Some(Item::Event(event)) => return Ok(Some(event)),
                Some(Item::Truncated(line)) => {
                    self.notes.truncated_line = Some(line);
                    return Ok(None);
                }
                Some(Item::End(end)) => self.notes.end = Some(end),
                Some(Item::Frame(frame)) => self.stacks.add_frame(frame),
                Some(Item::Node(node)) => self.stacks.add_node(node),
                Some(Item::Name(id, text)) => {
                    self.names.insert(id, text);
                }
                Some(Item::Lost(lost)) => self.notes.lost_calls += lost.calls,
                Some(Item::UnknownApi) => self.notes.unknown_apis += 1,
                Some(Item::UnknownRecord) => self.notes.unknown_records += 1,
            }
        }
    }

    /// Restores the order within `events` events (at least [`MIN_WINDOW`], at most
    /// [`REORDER_WINDOW`]) instead: a run of many traces bounds what all its readers hold
    /// ahead. An event later than that is counted in [`ReadNotes::late_events`].
    pub fn set_window(&mut self, events: usize) {
        self.window = events.clamp(MIN_WINDOW, REORDER_WINDOW);
        // What a pool parses ahead is a part of it: a quarter, a batch in hand and one
        // parsed ahead.
        if let Source::Pooled(p) = &mut self.source {
            p.set_batch(self.window / 4);
        }
    }

    /// The next event in time order (restored within the window, [`REORDER_WINDOW`]
    /// events unless set). After an error, the events read before it have all been
    /// returned.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        while !self.done && self.pending.len() < self.window {
            match self.next_raw() {
                Ok(Some(event)) => self.pending.push(event),
                Ok(None) => self.done = true,
                Err(e) => {
                    self.done = true;
                    if self.pending.is_empty() {
                        return Err(e);
                    }
                    // Hand out what was read first; the error comes after it.
                    self.deferred = Some(e);
                }
            }
        }
        if let Some(e) = self.pending.pop() {
            if self.handed_out.is_some_and(|t| e.t < t) {
                self.notes.late_events += 1;
            }
            self.handed_out = Some(self.handed_out.map_or(e.t, |t| t.max(e.t)));
            return Ok(Some(e));
        }
        // Read to the end: a run of a thousand traces keeps no buffers of those it read.
        self.pending = Ahead::default();
        self.source = Source::Finished;
        match self.deferred.take() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

/// Reads and checks the first line.
fn read_header<R: Read>(lines: &mut Lines<R>) -> Result<Header, TraceError> {
    match lines.read_line()? {
        LineRead::Eof => {
            lines.line_no = 1;
            return Err(lines.error("empty file: expected a vramtrace header".into()));
        }
        LineRead::TooLong => {
            return Err(lines
                .error("not a vramtrace trace: the first line is not a header (too long)".into()))
        }
        LineRead::Cut | LineRead::Full => {}
    }
    #[derive(Deserialize)]
    struct Probe {
        format: Option<String>,
        version: Option<u64>,
    }
    let probe: Probe = serde_json::from_slice(&lines.line).map_err(|_| {
        lines.error(format!(
            "not a vramtrace trace: expected a JSON header with \"format\":\"{FORMAT_NAME}\""
        ))
    })?;
    if probe.format.as_deref() != Some(FORMAT_NAME) {
        return Err(lines.error(format!(
            "not a vramtrace trace: expected \"format\":\"{FORMAT_NAME}\" in the header"
        )));
    }
    match probe.version {
        Some(v) if v >= 1 && v <= FORMAT_VERSION as u64 => {}
        Some(v) => {
            return Err(lines.error(format!(
                "trace format version {v} is not supported: this vramtrace reads versions 1 to {FORMAT_VERSION}; a newer vramtrace is needed"
            )))
        }
        None => return Err(lines.error("header has no \"version\"".into())),
    }
    serde_json::from_slice(&lines.line).map_err(|e| lines.error(format!("invalid header: {e}")))
}
