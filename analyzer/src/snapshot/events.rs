//! A PyTorch snapshot as the events of a trace, so that it feeds the same replay model as
//! a trace and every view reads it. Each device's history is followed through the
//! allocator model (`device_history.rs`); this merges the devices by time and keeps what
//! the views say of the file: its notes, what its histories started with, and the
//! allocator's shape at each failure.
//!
//! The history is streamed from the decoded pickle (`history.rs`), never copied into the
//! snapshot model: each device is a cursor that turns its next entry into events when
//! the replay asks, and the devices are merged by time. A frame list becomes a stack once,
//! however many entries share it.

use super::annotations::Annotations;
use super::device_history::{self, Cursor};
use super::history;
use super::pickle::Pickle;
use super::stack_ids::StackIds;
use crate::allocator::follow::Shape;
use crate::allocator::Settings;
use crate::model::{Category, Map, TensorCategories, Window};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use vramtrace_schema::{End, Event, Header, Settings as TraceSettings, StackTable};

/// Where the frame addresses and stack ids of a snapshot joining a trace begin: a trace's
/// node ids count up from 1, its native addresses are user-space ones (below 2^47) and its
/// Python frames' synthetic addresses have bit 63 set, so none lies in [2^62, 2^63).
pub const BESIDE_IDS: u64 = 1 << 62;

/// The header's `interposer` of a snapshot read as a process: how views tell it from a
/// traced one.
pub const SNAPSHOT_INTERPOSER: &str = "pytorch-snapshot";

/// A snapshot's events in time order, with the stacks they point at.
pub struct SnapshotEvents {
    pub header: Header,
    /// Known when the file is opened: the history says it is cut.
    pub notes: Vec<String>,
    /// The flags by which the file says its history was cut short (empty: it does not).
    pub history_truncated: Vec<String>,
    /// The settings the allocator ran under (recorded, or shown by the file).
    pub settings: Settings,
    path: PathBuf,
    /// Dropped by [`SnapshotEvents::release_file`] once every event is read.
    pickle: Option<Pickle>,
    devices: Vec<Cursor>,
    stacks: StackIds,
    /// The storages the PyTorch hook named (parameters, gradients, optimizer state).
    recorded: TensorCategories,
    origin_us: i64,
    /// The time of the last event, known before the events are read.
    latest_t: u64,
    /// The devices whose next event is read, by its time then ordinal: (time, index).
    fronts: BinaryHeap<Reverse<(u64, usize)>>,
    started: bool,
    /// PyTorch's own annotations, as markers merged with the devices' events.
    annotations: Annotations,
}

/// What the views say of a snapshot once its events are read.
#[derive(Debug, Clone, Default)]
pub struct SnapshotFacts {
    /// Per device: what its history started with.
    pub windows: Vec<(i32, Window)>,
    /// Per device: the allocator's shape at each `oom` entry, in order, and at the end.
    pub failures: Vec<(i32, Vec<Shape>)>,
    pub ends: Vec<(i32, Shape)>,
    /// Where the history and the final state, or the model and the recording, part.
    pub notes: Vec<String>,
    /// Per device: the first history entry that does not fit the final segments.
    pub misfits: Vec<(i32, usize)>,
    pub expandable_segments: bool,
}

/// Microseconds as nanoseconds, from 0 up to [`MAX_NS`]: a crafted `time_us` of 2^62
/// must neither overflow (it aborted the views) nor push an event past what the views'
/// clock sums hold.
fn ns_of_us(us: i64) -> u64 {
    u64::try_from(us)
        .unwrap_or(0)
        .saturating_mul(1000)
        .min(MAX_NS)
}

/// The latest time a snapshot's event is put at, in ns: about 146 years.
const MAX_NS: u64 = 1 << 62;

/// Epoch microseconds as ns since the snapshot's first entry.
fn time(origin_us: i64, us: i64) -> u64 {
    ns_of_us(us.saturating_sub(origin_us))
}

impl SnapshotFacts {
    /// Puts what the allocator model says into the process `model` read from the
    /// snapshot (its failures' allocator states among it); the notes to show.
    pub fn apply(self, model: &mut crate::model::ProcessModel) -> Vec<String> {
        model.windows = self.windows.into_iter().collect();
        model.allocator_ends = self.ends.into_iter().map(|(d, s)| (d, s.into())).collect();
        model.expandable_segments = Some(self.expandable_segments);
        for (dev, shapes) in self.failures {
            let failures = model.failures.iter_mut().filter(|f| f.event.dev == dev);
            for (f, shape) in failures.zip(shapes) {
                f.allocator = Some(shape.into());
            }
        }
        self.notes
    }
}

impl SnapshotEvents {
    /// Reads the snapshot at `path`. The error names the file.
    pub fn open(path: &Path, all_frames: bool) -> Result<SnapshotEvents, String> {
        let pickle = super::read::read_pickle(path)?;
        SnapshotEvents::build(path, pickle, all_frames, 0)
    }

    /// Reads the snapshot at `path` to join the trace of the process that wrote it: its
    /// frame addresses and stack ids start at [`BESIDE_IDS`], clear of the trace's own.
    pub fn open_beside(path: &Path, all_frames: bool) -> Result<SnapshotEvents, String> {
        let pickle = super::read::read_pickle(path)?;
        SnapshotEvents::build(path, pickle, all_frames, BESIDE_IDS)
    }

    /// What the allocator model says of the file at `path`, its events read and dropped:
    /// for views of the file alone (`vramtrace snapshot`).
    pub fn facts_of(path: &Path) -> Result<SnapshotFacts, String> {
        let mut events = SnapshotEvents::open(path, false)?;
        while events.next_event().is_some() {}
        Ok(events.facts())
    }

    /// The events of a decoded snapshot; `path` names it in notes and errors.
    pub fn from_pickle(
        path: &Path,
        pickle: Pickle,
        all_frames: bool,
    ) -> Result<SnapshotEvents, String> {
        SnapshotEvents::build(path, pickle, all_frames, 0)
    }

    fn build(
        path: &Path,
        pickle: Pickle,
        all_frames: bool,
        base: u64,
    ) -> Result<SnapshotEvents, String> {
        let at = |e: String| format!("{}: {e}", path.display());
        let snap = super::read::model_of(&pickle, false).map_err(at)?;
        let traces = history::device_traces(&pickle).map_err(at)?;
        let mut stacks = StackIds::new(base, all_frames);
        // Settings a file cannot say are the defaults (the views read any file).
        let recorded =
            Settings::from_recorded(snap.allocator_settings.as_ref()).unwrap_or_default();
        let mut rebuilt = Vec::new();
        for d in &snap.devices {
            let list = usize::try_from(d.device)
                .ok()
                .and_then(|i| traces.get(i).copied());
            let r =
                device_history::rebuild(&pickle, d, list, &recorded, &mut stacks).map_err(at)?;
            rebuilt.push(r);
        }
        let origin_us = rebuilt.iter().filter_map(|r| r.times.earliest_us).min();
        let origin = origin_us.unwrap_or(0);
        let latest_t = rebuilt
            .iter()
            .filter_map(|r| r.times.latest_us)
            .map(|us| time(origin, us))
            .max()
            .unwrap_or(0);
        let mut notes = Vec::new();
        // A history without times has no clock to place annotations on. One is placed
        // within the history's span (before it: at its start; after it: at its end), so
        // that a stray time does not stretch the run around it.
        let (annotations, note) = match origin_us {
            Some(origin) => Annotations::read(&pickle, |us| time(origin, us).min(latest_t)),
            None => (Annotations::default(), None),
        };
        if let Some(n) = note {
            notes.push(format!("note: {}: {n}", path.display()));
        }
        let mut named = TensorCategories::default();
        if let Some(n) = super::category::recorded(&pickle, &mut named) {
            notes.push(format!("note: {}: {n}", path.display()));
        }
        if !snap.history_truncated.is_empty() {
            notes.push(format!(
                "note: {}: the snapshot says its history was truncated ({}): entries before it are missing, what they left alive is rebuilt from the final segments",
                path.display(),
                snap.history_truncated.join(", ")
            ));
        }
        let settings = rebuilt.iter().fold(recorded, |mut s, r| {
            s.expandable_segments |= r.settings.expandable_segments;
            s
        });
        let devices = rebuilt
            .into_iter()
            .map(|r| {
                let start = time(origin, r.times.first_us.unwrap_or(origin));
                Cursor::new(r, start)
            })
            .collect();
        Ok(SnapshotEvents {
            header: header(path, origin_us),
            notes,
            history_truncated: snap.history_truncated.clone(),
            settings,
            path: path.to_path_buf(),
            pickle: Some(pickle),
            devices,
            stacks,
            recorded: named,
            origin_us: origin,
            latest_t,
            fronts: BinaryHeap::new(),
            started: false,
            annotations,
        })
    }

    /// The segments the history allocates (`segment_alloc`, `segment_map`) and has not
    /// handed out yet, with a time: (address, size, time), in time order. Those alive
    /// before the history are not among them (their time is the history's start, not
    /// theirs).
    pub fn segments_ahead(&self) -> Vec<(u64, u64, u64)> {
        let origin = self.origin_us;
        let Some(p) = &self.pickle else {
            return Vec::new();
        };
        let mut out: Vec<(u64, u64, u64)> = self
            .devices
            .iter()
            .flat_map(|c| c.segments_ahead(p, |us| time(origin, us)))
            .collect();
        out.sort_by_key(|s| s.2);
        out
    }

    /// The next event in time order: devices merged by time, each device's order kept
    /// (the lower ordinal first at equal times). A heap of the devices' next events, so a
    /// file naming thousands of devices costs a logarithm per event, not a scan of them.
    pub fn next_event(&mut self) -> Option<Event> {
        if !self.started {
            self.started = true;
            for i in 0..self.devices.len() {
                self.refill(i);
            }
        }
        // An annotation before the devices' next event, or at its time, comes first.
        let device_t = self.fronts.peek().map(|Reverse((t, _))| *t);
        if let Some(t) = self.annotations.next_time() {
            if device_t.is_none_or(|d| t <= d) {
                return self.annotations.pop();
            }
        }
        let Reverse((_, i)) = self.fronts.pop()?;
        let e = self.devices[i].pop()?;
        self.refill(i);
        Some(e)
    }

    /// The names of the markers its annotations make, by handle.
    pub fn marker_names(&self) -> Map<u64, String> {
        self.annotations.names.clone()
    }

    /// Once every event is read: the decoded file, and what only reading its frames
    /// needed, dropped. What is left (stacks, facts, the end) is a small part of it.
    pub fn release_file(&mut self) {
        self.pickle = None;
        self.stacks.done_reading();
    }

    /// Reads device `i`'s next events, and puts it back among the fronts if it has one.
    fn refill(&mut self, i: usize) {
        let origin = self.origin_us;
        let c = &mut self.devices[i];
        if let Some(p) = &self.pickle {
            c.fill(p, &mut self.stacks, |us| time(origin, us));
        }
        if let Some(e) = c.front() {
            self.fronts.push(Reverse((e.t, i)));
        }
    }

    /// Adds to `into` the categories of the stacks its events made since the last call.
    pub fn learn_categories(&mut self, into: &mut Map<u64, Category>) {
        self.stacks.learn_categories(into);
    }

    /// The stacks the events read so far point at (all of them once `next_event` has
    /// returned `None`), and what its tensors were for (by stack, and as recorded),
    /// taken.
    pub fn take_stacks(&mut self) -> (StackTable, TensorCategories) {
        let mut categories = std::mem::take(&mut self.recorded);
        categories.by_stack = std::mem::take(&mut self.stacks.categories);
        categories.labels = std::mem::take(&mut self.stacks.labels);
        categories.from_snapshot = true;
        (std::mem::take(&mut self.stacks.stacks), categories)
    }

    /// History entries in all, over the devices (before the first `next_event`).
    pub fn history_entries(&self) -> usize {
        self.devices.iter().map(|c| c.window.entries).sum()
    }

    /// The time of its last event, known before any is read (the replay keeps each
    /// device's clock from going back, so it ends at the device's latest time).
    pub fn latest_t(&self) -> u64 {
        self.latest_t
    }

    /// The end record a snapshot stands for (it was written whole), once `events` events
    /// were read, the last at `last_t`.
    pub fn end(&self, events: u64, last_t: Option<u64>) -> End {
        End {
            t: last_t.unwrap_or(self.latest_t),
            events,
            reason: "snapshot".into(),
            queue_peak_bytes: None,
        }
    }

    /// What the views say of the file, once its events are read.
    pub fn facts(&self) -> SnapshotFacts {
        let mut f = SnapshotFacts {
            expandable_segments: self.settings.expandable_segments,
            ..Default::default()
        };
        let path = self.path.display();
        for c in &self.devices {
            f.windows.push((c.dev, c.window));
            // What was alive before the history is the normal case (PyTorch keeps a
            // bounded history): `summary` says it once (`before_history`), not stderr.
            f.failures.push((c.dev, c.shapes.clone()));
            if let Some(end) = c.end_shape {
                f.ends.push((c.dev, end));
            }
            if let Some(m) = c.misfit() {
                f.misfits.push((c.dev, m.entry));
                f.notes.push(format!(
                    "note: {path}: device {}: history entry {} does not fit the final segments ({}): the figures follow the recorded entries from there",
                    c.dev, m.entry, m.message
                ));
            }
            if c.labels.unread_metadata > 0 {
                f.notes.push(format!(
                    "note: {path}: device {}: the user_metadata of {} left out (not a string or a dict of them, or over 4096 bytes)",
                    c.dev, entries(c.labels.unread_metadata)
                ));
            }
            if c.labels.annotations_left_out > 0 {
                f.notes.push(format!(
                    "note: {path}: device {}: {} left out (of no live tensor, or past 16 on one)",
                    c.dev,
                    crate::units::count(c.labels.annotations_left_out, "annotation")
                ));
            }
            if let Some(d) = c.drift() {
                f.notes.push(format!(
                    "note: {path}: device {}: from history entry {} the allocator model lays blocks out otherwise than the recording ({}): block sizes from there are the model's reading",
                    c.dev, d.entry, d.message
                ));
            }
        }
        if self.stacks.labels_left_out > 0 {
            f.notes.push(format!(
                "note: {path}: the labels (user_metadata, private pool) of {} left out: past {} distinct labels",
                crate::units::count(self.stacks.labels_left_out, "allocation"),
                super::stack_ids::MOST_LABELS
            ));
        }
        f
    }
}

fn header(path: &Path, origin_us: Option<i64>) -> Header {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    Header {
        format: vramtrace_schema::FORMAT_NAME.into(),
        version: vramtrace_schema::FORMAT_VERSION,
        pid: name.as_deref().and_then(pid_of).unwrap_or(0),
        ppid: 0,
        // Each snapshot is its own "host": its device ordinals are its own, and its
        // clock is the wall clock (`time_us`).
        host: name.clone().unwrap_or_default(),
        argv: Vec::new(),
        exe: path.display().to_string(),
        start_unix_ns: origin_us.map_or(0, ns_of_us),
        start_mono_ns: 0,
        env: name
            .as_deref()
            .and_then(super::names::rank_in_name)
            .map(|r| ("RANK".to_string(), r))
            .into_iter()
            .collect(),
        settings: TraceSettings {
            output: String::new(),
            children: false,
            flush_ms: 0,
            stack_depth: 0,
            python: true,
        },
        interposer: SNAPSHOT_INTERPOSER.into(),
    }
}

/// `torch-snapshot-HOST-PID...pickle` (the PyTorch hook's name; older hooks left out
/// `HOST-`) -> PID.
fn pid_of(name: &str) -> Option<u32> {
    super::names::writer(name).map(|(_, pid)| pid)
}

/// `n` history entries, in words (`allocation` and `annotate` entries both carry
/// `user_metadata`).
fn entries(n: u64) -> String {
    match n {
        1 => "1 history entry".to_string(),
        n => format!("{n} history entries"),
    }
}
