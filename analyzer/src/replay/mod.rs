//! The replay of a run (its traces and snapshots, whichever files or directories name
//! them): every process's model, on one common clock. (Wrapping a command to record a
//! run is `cmd/run.rs`.)
//!
//! The traces of a run are replayed together, in one merged pass in run-time order, so
//! that processes sharing a device are summed at every moment ([`RunDevices`]). Memory
//! stays proportional to what is live: one pending event per trace, plus the models (a
//! small snapshot's events are made before, and held compactly: `snapshots.rs`).
//!
//! A process's memory leaves the run's totals when the process ends ([`ends`]): processes
//! that ran one after another are never summed as if they had run at once.

mod beside;
pub mod devices;
mod ends;
mod feed;
mod files;
mod hook_ooms;
mod made;
mod progress;
mod queue;
mod snapshots;
pub mod snapshots_beside;

pub use devices::{DeviceId, RunDevices, RunGroupKey};

use crate::input;
use crate::model::{Change, ProcessModel};
use progress::Progress;
use std::cmp::Reverse;
use std::path::PathBuf;
use vramtrace_schema::reader::{compressed, ParsePool, TraceError, TraceReader};
use vramtrace_schema::Event;

pub struct Run {
    pub processes: Vec<ProcessModel>,
    /// Files that could not be read at all (no valid header).
    pub unreadable: Vec<TraceError>,
    /// What reading noticed that is not an error (a snapshot's history at odds with it).
    pub notes: Vec<String>,
    /// Each process's origin (its header's start) as run time.
    pub origins: Vec<u64>,
    /// Wall clock (ns since the Unix epoch) at run time 0.
    pub start_unix_ns: u64,
    /// Per physical device, all processes summed.
    pub devices: RunDevices,
    /// The same for the allocated layer: live tensors in requested bytes.
    pub tensors: RunDevices,
    /// Run time of the last event seen.
    pub end_time: u64,
    /// Run time of the last event read, replayed or not (past [`LoadOptions::until`]).
    pub last_read: u64,
}

/// One event as the replay applies it: views watch the run through these.
pub struct Step<'a> {
    pub process: usize,
    pub event: &'a Event,
    /// Run time of the event (ns since the run's start).
    pub time: u64,
    /// The process's state after the event.
    pub model: &'a ProcessModel,
    /// What the event did to device memory.
    pub changes: &'a [Change],
    /// The run's per-device totals after the event.
    pub devices: &'a RunDevices,
    /// The same for the allocated layer (live tensors, requested bytes).
    pub tensors: &'a RunDevices,
    /// The process had ended: `changes` is the memory it still held, given back from the
    /// run's totals (not from its own model, which keeps it as never freed), and `event`
    /// is its last event again, not a new one.
    pub ended: bool,
}

impl Step<'_> {
    /// The event is one of the program's markers (a point or a phase's end), not a
    /// category range's (`category:NAME`, which names what memory is for).
    pub fn is_program_marker(&self) -> bool {
        self.event.api.op() == vramtrace_schema::Op::Marker
            && !self
                .event
                .handle
                .and_then(|h| self.model.names.get(&h))
                .is_some_and(|n| crate::model::names_a_range(n))
    }
}

/// Events all traces of a run read ahead of the replay at most, together (a trace's share,
/// its reorder window, is at least [`vramtrace_schema::reader::MIN_WINDOW`]): some 100 MB
/// however many ranks a run has.
const READ_AHEAD: usize = 1 << 20;

#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Replay only events at or before this run time: the state is then the state at it.
    pub until: Option<u64>,
    /// Count peaks only from this run time on: the state before it is replayed, and what
    /// is held at it is the peak so far (as after `torch.cuda.reset_peak_memory_stats`).
    /// With `until`, the peaks are those of the stretch between (`check --phase`).
    pub peaks_from: Option<u64>,
}

struct Source {
    events: Events,
    next: Option<Event>,
    /// The process whose events these are: a trace's or a snapshot's own, or, for a hook
    /// snapshot beside the traces, the traced process that wrote it.
    process: usize,
}

/// Where a process's events come from. One per file, so the size of the trace reader
/// (kept inline: it is read once per event) costs nothing worth boxing.
#[allow(clippy::large_enum_variant)]
enum Events {
    Trace(TraceReader<Box<dyn std::io::Read + Send>>),
    Snapshot(feed::Feed),
    /// A hook snapshot's tensors joining a traced process.
    Beside(beside::Beside),
}

impl Run {
    /// Replays every trace under `paths`; `each` sees every event, in run-time order.
    pub fn load(
        paths: &[PathBuf],
        options: LoadOptions,
        mut each: impl FnMut(&Step),
    ) -> Result<Run, String> {
        let files = input::trace_files(paths)?;
        // Where the PyTorch hook's files lie beside the traces: the directories read (a
        // pack's, unpacked, too), not those of trace files named one by one.
        let mut hook_dirs: Vec<PathBuf> = files
            .iter()
            .filter(|f| !paths.contains(f))
            .filter_map(|f| f.parent().map(PathBuf::from))
            .collect();
        hook_dirs.sort();
        hook_dirs.dedup();
        let total: u64 = files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        let progress = Progress::new(total);
        let mut processes = Vec::new();
        let mut sources = Vec::new();
        let mut unreadable = Vec::new();
        let mut notes = Vec::new();
        let pool = files::Pool::new();
        let is_snapshot: Vec<bool> = files.iter().map(|f| input::is_snapshot(f)).collect();
        let snapshot_files: Vec<PathBuf> = files
            .iter()
            .zip(&is_snapshot)
            .filter(|(_, &s)| s)
            .map(|(f, _)| f.clone())
            .collect();
        let mut opened = snapshots::open_all(
            &snapshot_files,
            crate::frame_options::all_frames(),
            options.until.is_none(),
        )
        .into_iter();
        progress.read_elsewhere(
            snapshot_files
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum(),
        );
        // Threads making large snapshots' events beside the replay: one per other CPU.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut feed_threads = cpus - 1;
        // More traces than CPUs (a run of many ranks): a pool of threads parses for all
        // of them, where a thread of its own for each of the first few would leave the
        // rest to the replay's CPU.
        let traces = is_snapshot.iter().filter(|s| !**s).count();
        let parse_pool = (traces > cpus).then(ParsePool::new);
        for (file, is_snapshot) in files.into_iter().zip(is_snapshot) {
            if is_snapshot {
                let events = opened
                    .next()
                    .unwrap_or_else(|| Err(format!("{}: not read", file.display())));
                match events {
                    Ok(snapshots::Opened { snap, made }) => {
                        let threaded = made.is_none()
                            && feed_threads > 0
                            && snap.history_entries() >= feed::THREAD_ENTRIES;
                        feed_threads -= threaded as usize;
                        notes.extend(snap.notes.iter().cloned());
                        let mut model = ProcessModel::new(file, snap.header.clone());
                        model.history_truncated = snap.history_truncated.clone();
                        // Known before its events: PyTorch's annotations' names.
                        model.names = snap.marker_names();
                        processes.push(model);
                        sources.push(Source {
                            events: Events::Snapshot(match made {
                                Some(made) => feed::Feed::made(snap, made),
                                None => feed::Feed::new(snap, threaded),
                            }),
                            next: None,
                            process: sources.len(),
                        });
                    }
                    Err(message) => unreadable.push(TraceError {
                        path: file,
                        line: 0,
                        message: message
                            .split_once(": ")
                            .map_or(message.clone(), |m| m.1.to_string()),
                    }),
                }
                continue;
            }
            // Progress counts the bytes of the file as stored, compressed or not; the pool
            // reopens a file it closed below the decompressor, which sees one stream.
            let opened = pool.open(&file).and_then(|f| {
                compressed::decompressed(progress.wrap(f)).map_err(|e| format!("cannot read: {e}"))
            });
            let opened = opened.map_err(|message| TraceError {
                path: file.clone(),
                line: 0,
                message,
            });
            let reader = opened.and_then(|f| match &parse_pool {
                Some(pool) => TraceReader::new_pooled(&file, f, pool),
                None => TraceReader::new_parallel(&file, f),
            });
            match reader {
                Ok(reader) => {
                    processes.push(ProcessModel::new(file, reader.header().clone()));
                    sources.push(Source {
                        events: Events::Trace(reader),
                        next: None,
                        process: sources.len(),
                    });
                }
                Err(e) => unreadable.push(e),
            }
        }
        // Sources past the processes' own: hook snapshots joining a traced process.
        for b in beside::hook_snapshots(&hook_dirs, &processes, &mut notes) {
            sources.push(Source {
                process: b.process,
                events: Events::Beside(b),
                next: None,
            });
        }
        let (origins, start_unix_ns) = clock(&processes);
        let mut run = Run {
            processes,
            unreadable,
            notes,
            origins,
            start_unix_ns,
            devices: RunDevices::default(),
            tensors: RunDevices::default(),
            end_time: 0,
            last_read: 0,
        };
        // What every trace reads ahead of the replay, together, is bounded.
        let traces = sources
            .iter()
            .filter(|x| matches!(x.events, Events::Trace(_)))
            .count();
        for x in &mut sources {
            if let Events::Trace(reader) = &mut x.events {
                reader.set_window(READ_AHEAD / traces.max(1));
            }
        }
        // (run time, what, source): at one moment, events before ends. A trace is read
        // from its start on (its events are timed after its header's start).
        let mut queue = queue::Queue::new();
        for i in 0..sources.len() {
            if matches!(sources[i].events, Events::Trace(_)) {
                let start = run.origins[sources[i].process];
                queue.push(Reverse((start, ends::START, i)));
            } else if let Some(t) = run.pull(&mut sources, i) {
                queue.push(Reverse((t, ends::EVENT, i)));
            }
        }
        let mut ends = ends::Ends::default();
        let mut applied: u64 = 0;
        // Processes that are over (at their end record; a cut trace at its last event): a
        // hook snapshot's tensors timed after that (clocks a little apart) would outlive
        // the process.
        let mut over = vec![false; run.processes.len()];
        // The hook snapshot joining each process, whose clock its trace checks.
        let mut beside_of: Vec<Option<usize>> = vec![None; run.processes.len()];
        for (k, x) in sources.iter().enumerate() {
            if matches!(x.events, Events::Beside(_)) {
                beside_of[x.process] = Some(k);
            }
        }
        let mut joined = beside::Joined::new(
            run.processes.len(),
            sources
                .iter()
                .filter(|x| matches!(x.events, Events::Beside(_)))
                .map(|x| x.process),
        );
        let mut peaks_restarted = false;
        while let Some(Reverse((time, what, s))) = queue.pop() {
            // An end is queued with its process; an event with its source.
            let i = if what == ends::END {
                s
            } else {
                sources[s].process
            };
            if what == ends::EVENT {
                run.last_read = run.last_read.max(time);
            }
            if options.until.is_some_and(|u| time > u) {
                continue;
            }
            if !peaks_restarted && options.peaks_from.is_some_and(|from| time >= from) {
                peaks_restarted = true;
                run.restart_peaks(time);
            }
            if what == ends::START {
                if let Some(t) = run.pull(&mut sources, s) {
                    queue.push(Reverse((t, ends::EVENT, s)));
                }
                continue;
            }
            if what == ends::END {
                over[i] = true;
                ends.release(&mut run, i, None, time, &mut each);
                continue;
            }
            let event = sources[s]
                .next
                .take()
                .expect("a queued source has an event");
            let beside = matches!(sources[s].events, Events::Beside(_));
            let (admitted, withdrawn) = joined.admit(i, beside, &event);
            if let Some(note) = joined.note(i, &run.processes[i]) {
                run.notes.push(note);
            }
            for free in withdrawn {
                run.replay(&mut ends, i, time, &free, &mut each);
            }
            if over[i] || !admitted {
                if let Some(t) = run.pull(&mut sources, s) {
                    queue.push(Reverse((t, ends::EVENT, s)));
                }
                continue;
            }
            run.replay(&mut ends, i, time, &event, &mut each);
            if let (false, Some(k)) = (beside, beside_of[i]) {
                if let Events::Beside(b) = &mut sources[k].events {
                    b.check_clock(&event);
                }
            }
            match run.pull(&mut sources, s) {
                Some(t) => queue.push(Reverse((t, ends::EVENT, s))),
                None if beside => {}
                None => {
                    // A snapshot is the state at its dump, not a process that ended.
                    let end = match &sources[s].events {
                        Events::Trace(r) => r.notes.end.as_ref().map(|e| e.t),
                        _ => None,
                    };
                    // The process is over at its end record, or, cut, at its last event.
                    match ends.ran_out(&run, i, event, time, end) {
                        Some(t) => queue.push(Reverse((t, ends::END, i))),
                        None => over[i] = true,
                    }
                }
            }
            applied += 1;
            if applied.is_multiple_of(65_536) {
                progress.tick();
            }
        }
        progress.done();
        for (model, source) in run.processes.iter_mut().zip(&mut sources) {
            match &mut source.events {
                Events::Trace(reader) => {
                    model.notes = std::mem::take(&mut reader.notes);
                    model.stacks = std::mem::take(&mut reader.stacks);
                    model.names = std::mem::take(&mut reader.names).into_iter().collect();
                }
                Events::Snapshot(feed) => {
                    model.notes.end = feed.end();
                    (model.stacks, model.categories) = feed.take_stacks();
                    if let Some(facts) = feed.facts() {
                        run.notes.extend(facts.apply(model));
                    }
                }
                Events::Beside(_) => {}
            }
        }
        for source in &mut sources {
            if let Events::Beside(b) = &mut source.events {
                let (stacks, categories) = b.take_stacks();
                let model = &mut run.processes[source.process];
                model.stacks.merge(stacks);
                model.categories.extend(categories);
                run.notes.extend(b.clock_note());
            }
        }
        for model in &mut run.processes {
            model.finish();
        }
        run.devices.finish();
        run.tensors.finish();
        hook_ooms::attach(&hook_dirs, &mut run);
        Ok(run)
    }

    /// Applies `event` to process `i` at run time `time`, and to the run's totals; `each`
    /// sees it.
    fn replay(
        &mut self,
        ends: &mut ends::Ends,
        i: usize,
        time: u64,
        event: &Event,
        each: &mut impl FnMut(&Step),
    ) {
        self.processes[i].apply(event);
        ends.starting(self, i, time, each);
        let model = &self.processes[i];
        self.devices.apply(i, &model.header, time, model.changes());
        self.tensors
            .apply(i, &model.header, time, model.tensor_changes());
        self.end_time = self.end_time.max(time);
        each(&Step {
            process: i,
            event,
            time,
            model,
            changes: model.changes(),
            devices: &self.devices,
            tensors: &self.tensors,
            ended: false,
        });
    }

    /// [`LoadOptions::peaks_from`] reached at run time `time`: every peak, of every process
    /// and of the run's devices, counts from here.
    fn restart_peaks(&mut self, time: u64) {
        for (p, origin) in self.processes.iter_mut().zip(&self.origins) {
            p.restart_peaks(time.saturating_sub(*origin));
        }
        self.devices.restart_peaks(time);
        self.tensors.restart_peaks(time);
    }

    /// Reads the next event of source `i` into it; returns its run time.
    fn pull(&mut self, sources: &mut [Source], s: usize) -> Option<u64> {
        let source = &mut sources[s];
        let i = source.process;
        let next = match &mut source.events {
            Events::Trace(reader) => {
                let next = reader.next_event();
                // The model learns a marker's name with its event (the reader has read
                // the name's record before it): a category range is a marker.
                if let Ok(Some(e)) = &next {
                    if let (vramtrace_schema::Op::Marker, Some(h)) = (e.api.op(), e.handle) {
                        if let Some(name) = reader.names.get(&h) {
                            self.processes[i]
                                .names
                                .entry(h)
                                .or_insert_with(|| name.clone());
                        }
                    }
                }
                next
            }
            Events::Snapshot(snap) => {
                let next = snap.next_event();
                snap.learn_categories(&mut self.processes[i].categories.by_stack);
                Ok(next)
            }
            Events::Beside(b) => {
                let next = b.next_event();
                b.learn_categories(&mut self.processes[i].categories.by_stack);
                Ok(next)
            }
        };
        match next {
            Ok(Some(event)) => {
                let t = self.origins[i] + event.t;
                source.next = Some(event);
                Some(t)
            }
            Ok(None) => None,
            Err(e) => {
                self.processes[i].error = Some(e);
                None
            }
        }
    }

    /// Run time of process `i`'s time `t`.
    pub fn time_of(&self, i: usize, t: u64) -> u64 {
        self.origins[i] + t
    }

    /// Problems met while reading, one line each, for stderr.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .unreadable
            .iter()
            .map(|e| format!("error: {e}"))
            .chain(self.notes.iter().cloned())
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
            let unkept = p.counts.failed_allocations - p.failures.len() as u64;
            if unkept > 0 {
                out.push(format!(
                    "note: {}: {} more failed allocations after the first {} are counted but not described (no post-mortem)",
                    p.path.display(),
                    unkept,
                    crate::model::KEPT_FAILURES
                ));
            }
            if let Some((n, first)) = p.misnamed_ranges() {
                out.push(format!(
                    "note: {}: {} look like category ranges but name no category (the first: `{first}`): they are plain markers, and what was allocated inside them has no category. A range is named one of {}",
                    p.path.display(),
                    crate::units::count(n, "marker"),
                    crate::model::Category::range_names().join(", ")
                ));
            }
            if p.notes.late_events > 0 {
                out.push(format!(
                    "note: {}: {} of its events came later in the file than its reorder window reaches, and were replayed after events timed after them",
                    p.path.display(),
                    p.notes.late_events
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

    /// Whether every trace was read to its end without error, its last line whole (a
    /// line cut by a kill could not be read: exit status 1, as for any other).
    pub fn complete(&self) -> bool {
        self.unreadable.is_empty()
            && self
                .processes
                .iter()
                .all(|p| p.error.is_none() && p.notes.truncated_line.is_none())
    }
}

/// Each process's origin on the run clock and the wall clock at run time 0. One host:
/// CLOCK_MONOTONIC is shared, so origins are exact. Several hosts: monotonic clocks are
/// unrelated, so processes are aligned by wall clock.
fn clock(processes: &[ProcessModel]) -> (Vec<u64>, u64) {
    let Some(first) = processes.first() else {
        return (Vec::new(), 0);
    };
    let many_hosts = processes.iter().any(|p| p.header.host != first.header.host);
    let origin = |p: &ProcessModel| {
        if many_hosts {
            p.header.start_unix_ns
        } else {
            p.header.start_mono_ns
        }
    };
    let zero = processes.iter().map(origin).min().unwrap_or(0);
    let origins: Vec<u64> = processes.iter().map(|p| origin(p) - zero).collect();
    let start_unix_ns = processes
        .iter()
        .zip(&origins)
        .map(|(p, &o)| p.header.start_unix_ns.saturating_sub(o))
        .min()
        .unwrap_or(0);
    (origins, start_unix_ns)
}
