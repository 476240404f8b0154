//! The lines of a trace after its header, each turned into what it records.

use super::{TraceError, MAX_DEVICES, MAX_LINE};
use crate::api::Api;
use crate::event::{End, Event};
use crate::location::Location;
use crate::name::Name;
use crate::stacks::{Frame, Node, MAX_STACK_DEPTH};
use serde::Deserialize;
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

type Depths = std::collections::HashMap<u64, u32>;

/// What one line records.
#[derive(Debug)]
pub enum Item {
    Event(Event),
    End(End),
    Frame(Frame),
    Node(Node),
    /// A marker name: (id, text).
    Name(u64, String),
    /// Calls the interposer could not record.
    Lost(crate::lost::Lost),
    /// An event of an API this reader does not know (written by a newer interposer).
    UnknownApi,
    /// A record this reader does not know (a newer optional record).
    UnknownRecord,
    /// The last line had no newline (the process was killed mid-write): the line number
    /// of the dropped line. Nothing follows.
    Truncated(u64),
}

/// One line after the header. Unknown keys are ignored, so a newer minor addition (a new
/// optional field or record) does not stop an older reader.
#[derive(Deserialize)]
struct Line<'a> {
    // Borrowed unless the name holds an escape (`"cuda\u004dalloc"`), which is decoded.
    #[serde(borrow)]
    api: Option<Cow<'a, str>>,
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
    #[serde(borrow)]
    loc: Option<Cow<'a, str>>,
    numa: Option<u32>,
    #[serde(default)]
    stack: u64,
    /// Only a header has it: see [`Lines::record`].
    format: Option<serde::de::IgnoredAny>,
    end: Option<End>,
    frame: Option<Frame>,
    node: Option<Node>,
    name: Option<Name>,
    lost: Option<crate::lost::Lost>,
}

fn no_device() -> i32 {
    -1
}

pub enum LineRead {
    Eof,
    /// A complete line (without its newline).
    Full,
    /// The last line, without a newline.
    Cut,
    TooLong,
}

/// A trace's input, line by line.
pub struct Lines<R> {
    pub path: PathBuf,
    input: BufReader<R>,
    pub line: Vec<u8>,
    pub line_no: u64,
    /// Frames from each stack node to the root, to refuse chains no interposer writes
    /// (boxed: `Lines` is handed back by value when no parsing thread starts).
    depths: Box<Depths>,
}

impl<R: Read> Lines<R> {
    pub fn new(path: PathBuf, input: R) -> Lines<R> {
        Lines {
            path,
            input: BufReader::with_capacity(1 << 16, input),
            line: Vec::with_capacity(512),
            line_no: 0,
            depths: Default::default(),
        }
    }

    pub fn error(&self, message: String) -> TraceError {
        TraceError {
            path: self.path.clone(),
            line: self.line_no,
            message,
        }
    }

    /// Reads one line into `self.line`, refusing lines longer than [`MAX_LINE`] without
    /// buffering them, and without reading the rest of such a line: a too-long line ends
    /// the trace, so a 2-GB line costs one MiB of reading, not two GB.
    pub fn read_line(&mut self) -> Result<LineRead, TraceError> {
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

    /// What the next line records; `None` at the end. Blank lines are skipped.
    pub fn item(&mut self) -> Result<Option<Item>, TraceError> {
        loop {
            match self.read_line()? {
                LineRead::Eof => return Ok(None),
                LineRead::Cut => return Ok(Some(Item::Truncated(self.line_no))),
                LineRead::TooLong => {
                    return Err(self.error(format!(
                        "line longer than {MAX_LINE} bytes: expected one JSON record per line"
                    )))
                }
                LineRead::Full => {}
            }
            if let Some(event) = crate::fast::event(&self.line) {
                return self.checked(event).map(Some);
            }
            if self.line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let line: Line = serde_json::from_slice(&self.line)
                .map_err(|e| self.error(format!("expected a JSON event or record: {e}")))?;
            let mut depths = std::mem::take(&mut self.depths);
            let item = self.record(line, &mut depths);
            self.depths = depths;
            return item.map(Some);
        }
    }

    fn record(&self, line: Line, depths: &mut Depths) -> Result<Item, TraceError> {
        // Two traces joined into one file (`cat a.jsonl b.jsonl`, or `cat` of two .gz files,
        // which decompress as one stream) are two processes: never read as one.
        if line.format.is_some() {
            return Err(self.error(
                "a second trace header: this file holds two traces joined together; what \
                 comes before this line is read, the rest is not (split the file here)"
                    .into(),
            ));
        }
        if let Some(end) = line.end {
            return Ok(Item::End(end));
        }
        if let Some(frame) = line.frame {
            return Ok(Item::Frame(frame));
        }
        if let Some(node) = line.node {
            let depth = 1 + depths.get(&node.parent).copied().unwrap_or(0);
            if depth as usize > MAX_STACK_DEPTH {
                return Err(self.error(format!(
                    "stack node {} is {depth} frames deep: a stack has at most {MAX_STACK_DEPTH}",
                    node.id
                )));
            }
            depths.insert(node.id, depth);
            return Ok(Item::Node(node));
        }
        if let Some(name) = line.name {
            return Ok(Item::Name(name.id, name.text));
        }
        if let Some(lost) = line.lost {
            return Ok(Item::Lost(lost));
        }
        let Some(name) = line.api else {
            return Ok(Item::UnknownRecord);
        };
        let Some(api) = Api::from_name(&name) else {
            return Ok(Item::UnknownApi);
        };
        // A location this reader does not know is memory it cannot place: the event is
        // skipped like one of an unknown API, not counted as device memory.
        let loc = match line.loc.as_deref().map(Location::from_name) {
            None => Location::Device,
            Some(Some(loc)) => loc,
            Some(None) => return Ok(Item::UnknownApi),
        };
        let Some(t) = line.t else {
            return Err(self.error(format!("event {name} has no \"t\" (time)")));
        };
        self.checked(Event {
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
            loc,
            numa: line.numa,
            stack: line.stack,
        })
    }

    /// The event, if its figures are ones the interposer can write.
    fn checked(&self, event: Event) -> Result<Item, TraceError> {
        if !(-1..MAX_DEVICES).contains(&event.dev) {
            return Err(self.error(format!(
                "device ordinal {} out of range: expected -1 (none) or 0 to {}",
                event.dev,
                MAX_DEVICES - 1
            )));
        }
        Ok(Item::Event(event))
    }
}
