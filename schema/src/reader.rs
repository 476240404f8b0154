//! Streaming reader: one line at a time, memory bounded by the longest line allowed and
//! the reorder window, never by the length of the trace.

use crate::api::Api;
use crate::event::{End, Event};
use crate::header::{Header, FORMAT_NAME, FORMAT_VERSION};
use crate::stacks::{Frame, Node, StackTable};
use serde::Deserialize;
use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Longest line a reader accepts. Records are a few hundred bytes; anything longer is not
/// something the interposer wrote.
pub const MAX_LINE: usize = 1 << 20;

/// Events are written in time order per flush; a thread preempted between its timestamp
/// and its queue push can land a few events late. Readers restore the order within this
/// many events.
pub const REORDER_WINDOW: usize = 1 << 16;

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

/// One line after the header. Unknown keys are ignored, so a newer minor addition (a new
/// optional field or record) does not stop an older reader.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    api: Option<&'a str>,
    t: Option<u64>,
    #[serde(default)]
    tid: u32,
    #[serde(default = "no_device")]
    dev: i32,
    #[serde(default)]
    res: i32,
    #[serde(default)]
    addr: u64,
    #[serde(default)]
    size: u64,
    stream: Option<u64>,
    pool: Option<u64>,
    handle: Option<u64>,
    offset: Option<u64>,
    free: Option<u64>,
    total: Option<u64>,
    requested: Option<u64>,
    #[serde(default)]
    stack: u64,
    end: Option<End>,
    frame: Option<Frame>,
    node: Option<Node>,
    name: Option<Name>,
}

/// `{"name":{"id":N,"text":"..."}}`: a marker name, before the first marker using it.
#[derive(Deserialize)]
struct Name {
    id: u64,
    text: String,
}

fn no_device() -> i32 {
    -1
}

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
    pub lines: u64,
}

/// Reads a trace file event by event.
pub struct TraceReader<R: Read = File> {
    path: PathBuf,
    input: BufReader<R>,
    header: Header,
    line: Vec<u8>,
    line_no: u64,
    pub notes: ReadNotes,
    /// Frames and stack nodes read so far (they precede the events that use them).
    pub stacks: StackTable,
    /// Marker names by id (`vramtrace_marker` events carry the id in `handle`).
    pub names: std::collections::HashMap<u64, String>,
    /// Events read ahead, kept sorted by time (stable for equal times).
    pending: VecDeque<Event>,
    done: bool,
    deferred: Option<TraceError>,
}

impl TraceReader<File> {
    /// Opens a trace and reads its header.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|e| TraceError {
            path: path.to_path_buf(),
            line: 0,
            message: format!("cannot open: {e}"),
        })?;
        TraceReader::new(path, file)
    }
}

enum LineRead {
    Eof,
    /// A complete line (without its newline).
    Full,
    /// The last line, without a newline.
    Cut,
    TooLong,
}

impl<R: Read> TraceReader<R> {
    /// Reads the header from `input`; `path` is only used in messages.
    pub fn new(path: &Path, input: R) -> Result<Self, TraceError> {
        let mut reader = TraceReader {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 16, input),
            header: placeholder_header(),
            line: Vec::with_capacity(512),
            line_no: 0,
            notes: ReadNotes::default(),
            stacks: StackTable::default(),
            names: Default::default(),
            pending: VecDeque::new(),
            done: false,
            deferred: None,
        };
        reader.header = reader.read_header()?;
        Ok(reader)
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, message: String) -> TraceError {
        TraceError {
            path: self.path.clone(),
            line: self.line_no,
            message,
        }
    }

    fn read_header(&mut self) -> Result<Header, TraceError> {
        match self.read_line()? {
            LineRead::Eof => {
                self.line_no = 1;
                return Err(self.error("empty file: expected a vramtrace header".into()));
            }
            LineRead::TooLong => {
                return Err(self.error(
                    "not a vramtrace trace: the first line is not a header (too long)".into(),
                ))
            }
            LineRead::Cut | LineRead::Full => {}
        }
        #[derive(Deserialize)]
        struct Probe {
            format: Option<String>,
            version: Option<u64>,
        }
        let probe: Probe = serde_json::from_slice(&self.line).map_err(|_| {
            self.error(format!(
                "not a vramtrace trace: expected a JSON header with \"format\":\"{FORMAT_NAME}\""
            ))
        })?;
        if probe.format.as_deref() != Some(FORMAT_NAME) {
            return Err(self.error(format!(
                "not a vramtrace trace: expected \"format\":\"{FORMAT_NAME}\" in the header"
            )));
        }
        match probe.version {
            Some(v) if v >= 1 && v <= FORMAT_VERSION as u64 => {}
            Some(v) => {
                return Err(self.error(format!(
                    "trace format version {v} is not supported: this vramtrace reads versions 1 to {FORMAT_VERSION}; a newer vramtrace is needed"
                )))
            }
            None => return Err(self.error("header has no \"version\"".into())),
        }
        serde_json::from_slice(&self.line).map_err(|e| self.error(format!("invalid header: {e}")))
    }

    /// Reads one line into `self.line`, refusing lines longer than [`MAX_LINE`] without
    /// buffering them, and without reading the rest of such a line: a too-long line ends
    /// the trace, so a 2-GB line costs one MiB of reading, not two GB.
    fn read_line(&mut self) -> Result<LineRead, TraceError> {
        self.line.clear();
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.error(format!("read error: {e}"))),
            };
            if chunk.is_empty() {
                if self.line.is_empty() {
                    return Ok(LineRead::Eof);
                }
                self.line_no += 1;
                return Ok(LineRead::Cut);
            }
            let (take, found) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            let body = if found { &chunk[..take - 1] } else { chunk };
            if self.line.len() + body.len() > MAX_LINE {
                self.line.clear();
                self.line_no += 1;
                return Ok(LineRead::TooLong);
            }
            self.line.extend_from_slice(body);
            self.input.consume(take);
            if found {
                self.line_no += 1;
                return Ok(LineRead::Full);
            }
        }
    }

    /// The next event in the file's order, or `None` at the end.
    fn next_raw(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            match self.read_line()? {
                LineRead::Eof => return Ok(None),
                LineRead::Cut => {
                    self.notes.truncated_line = Some(self.line_no);
                    return Ok(None);
                }
                LineRead::TooLong => {
                    return Err(self.error(format!(
                        "line longer than {MAX_LINE} bytes: expected one JSON record per line"
                    )))
                }
                LineRead::Full => {}
            }
            self.notes.lines = self.line_no;
            if let Some(event) = crate::fast::event(&self.line) {
                return Ok(Some(event));
            }
            if self.line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let line: Line = serde_json::from_slice(&self.line)
                .map_err(|e| self.error(format!("expected a JSON event or record: {e}")))?;
            if let Some(end) = line.end {
                self.notes.end = Some(end);
                continue;
            }
            if let Some(frame) = line.frame {
                self.stacks.add_frame(frame);
                continue;
            }
            if let Some(node) = line.node {
                self.stacks.add_node(node);
                continue;
            }
            if let Some(name) = line.name {
                self.names.insert(name.id, name.text);
                continue;
            }
            let Some(name) = line.api else {
                self.notes.unknown_records += 1;
                continue;
            };
            let Some(api) = Api::from_name(name) else {
                self.notes.unknown_apis += 1;
                continue;
            };
            let Some(t) = line.t else {
                return Err(self.error(format!("event {name} has no \"t\" (time)")));
            };
            return Ok(Some(Event {
                t,
                tid: line.tid,
                dev: line.dev,
                api,
                res: line.res,
                addr: line.addr,
                size: line.size,
                stream: line.stream,
                pool: line.pool,
                handle: line.handle,
                offset: line.offset,
                free: line.free,
                total: line.total,
                requested: line.requested,
                stack: line.stack,
            }));
        }
    }

    /// The next event in time order (restored within [`REORDER_WINDOW`] events).
    /// After an error, the events read before it have all been returned.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        while !self.done && self.pending.len() < REORDER_WINDOW {
            match self.next_raw() {
                Ok(Some(event)) => {
                    // Nearly always in order: an append. A late event slides back in.
                    if self.pending.back().is_none_or(|last| last.t <= event.t) {
                        self.pending.push_back(event);
                    } else {
                        let at = self.pending.partition_point(|e| e.t <= event.t);
                        self.pending.insert(at, event);
                    }
                }
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
        if let Some(e) = self.pending.pop_front() {
            return Ok(Some(e));
        }
        match self.deferred.take() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

fn placeholder_header() -> Header {
    Header {
        format: String::new(),
        version: 0,
        pid: 0,
        ppid: 0,
        host: String::new(),
        argv: Vec::new(),
        exe: String::new(),
        start_unix_ns: 0,
        start_mono_ns: 0,
        env: Default::default(),
        settings: crate::header::Settings {
            output: String::new(),
            children: true,
            flush_ms: 0,
            stack_depth: 0,
            python: false,
        },
        interposer: String::new(),
    }
}
