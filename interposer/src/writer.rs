//! The writer: drains the queue, formats events and writes them, on its own thread every
//! flush interval, or at once from the calling thread when an allocation failed or the
//! process is about to end.

use crate::queue::{self, Queued};
use crate::stack::intern::{self, Interner, NewNode};
use crate::stack::symbolize::Symbolizer;
use crate::trace_fd::TraceFd;
use crate::{clock, output, settings, warn};
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
use vramtrace_schema::{End, JsonBuf, JsonOut};

enum State {
    /// No file yet: it is created with the first flush that has something to write, so a
    /// process that never touches device memory leaves no trace file.
    Unopened,
    Open(TraceFd),
    /// Creating or writing failed: warned once, events are dropped from now on.
    Failed,
}

struct Writer {
    state: State,
    written: u64,
    batch: Vec<Queued>,
    /// The batch's words: return addresses and optional values ([`Queued`]).
    ips: Vec<u64>,
    spares: queue::Spares,
    /// Events newer than the last flush's cut, held for the next one (with their stacks).
    carry: Vec<Queued>,
    carry_ips: Vec<u64>,
    text: Vec<u8>,
    /// Stacks already in this file (reset with the file after fork).
    stacks: Option<Interner>,
    symbols: Option<Symbolizer>,
    /// Marker names already in this file.
    names_written: u64,
    /// Calls not recorded ([`crate::bound::lost`]) already counted in this file.
    lost_written: u64,
}

static WRITER: Mutex<Writer> = Mutex::new(Writer {
    state: State::Unopened,
    written: 0,
    batch: Vec::new(),
    ips: Vec::new(),
    spares: queue::Spares::new(),
    carry: Vec::new(),
    carry_ips: Vec::new(),
    text: Vec::new(),
    stacks: None,
    symbols: None,
    names_written: 0,
    lost_written: 0,
});

static THREAD_STARTED: AtomicBool = AtomicBool::new(false);
static FIRST_FLUSHED: AtomicBool = AtomicBool::new(false);
/// The writer thread's id as `/proc` names it (0: none yet).
static WRITER_TID: AtomicU32 = AtomicU32::new(0);

/// The writer thread's id as `/proc` names it, 0 while there is none.
pub fn thread_id() -> u32 {
    WRITER_TID.load(Ordering::Relaxed)
}

/// Starts the writer thread on the first event of the process.
#[inline]
pub fn ensure_thread() {
    if THREAD_STARTED.load(Ordering::Relaxed) || THREAD_STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let interval = Duration::from_millis(settings::get().flush_ms);
    let spawned = crate::thread::spawn("vramtrace-writer", move || loop {
        if WRITER_TID.load(Ordering::Relaxed) == 0 {
            WRITER_TID.store(crate::thread::proc_tid(), Ordering::Relaxed);
        }
        {
            let mut woken = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
            // The first flush comes at once: it creates the file, and a crash in the
            // first interval then still has a file to write its events to.
            if !*woken && FIRST_FLUSHED.swap(true, Ordering::Relaxed) {
                woken = match WAKE.1.wait_timeout(woken, interval) {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                };
            }
            *woken = false;
        }
        // The process is ending: the thread that ends it writes. A writer far behind a
        // busy program took the lock again right after each flush, and the ending
        // thread (std's mutex is not fair) waited for tens of seconds.
        if !FINISHING.load(Ordering::Relaxed) {
            flush_periodic();
            crate::last_thread::exit_if_alone();
        }
        crate::nvml::poll();
    });
    if spawned.is_err() {
        // Without a thread, every hook flushes what it queued itself.
        SYNC_WRITES.store(true, Ordering::Relaxed);
    }
}

static SYNC_WRITES: AtomicBool = AtomicBool::new(false);

/// Wakes the writer before its interval is up: a shard holding many events is written
/// while it still fits in cache, instead of growing to the whole interval's worth.
static WAKE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// Called by a hook whose push filled a shard to the wake-up mark.
#[cold]
pub fn wake() {
    let mut woken = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
    *woken = true;
    WAKE.1.notify_one();
}

/// Whether hooks must write synchronously (no writer thread, or the process is ending).
/// Asked after the push: the shard's lock orders it after the last flush's drain.
#[inline]
pub fn sync_writes() -> bool {
    SYNC_WRITES.load(Ordering::Relaxed)
}

/// Set once the process image starts ending: the writer thread stops taking the writer.
static FINISHING: AtomicBool = AtomicBool::new(false);

/// Writes everything queued so far.
pub fn flush() {
    lock().flush(None);
}

thread_local! {
    /// Whether this thread holds the writer: a signal handler that ends the process from
    /// inside a write must not wait for the write it interrupted.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// The writer, held by this thread.
struct Locked(ManuallyDrop<MutexGuard<'static, Writer>>);

impl Locked {
    fn new(guard: MutexGuard<'static, Writer>) -> Locked {
        let _ = HOLDING.try_with(|h| h.set(true));
        Locked(ManuallyDrop::new(guard))
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Unlocked first: until then, a handler on this thread must still see it held.
        // SAFETY: the guard is dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.0) };
        let _ = HOLDING.try_with(|h| h.set(false));
    }
}

impl std::ops::Deref for Locked {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.0
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.0
    }
}

fn holding() -> bool {
    HOLDING.try_with(Cell::get).unwrap_or(false)
}

/// The writer; a panic while it was held (none is expected) does not make it unusable.
fn lock() -> Locked {
    Locked::new(WRITER.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The writer if nobody holds it right now.
fn try_lock() -> Option<Locked> {
    match WRITER.try_lock() {
        Ok(g) => Some(Locked::new(g)),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(Locked::new(e.into_inner())),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The writer thread's periodic flush: writes the events timed before it started and
/// keeps newer ones for the next flush. Draining 64 shards takes a while on a busy
/// machine (the writer can be preempted half-way); without the cut, a shard drained late
/// brings events newer than those of a shard drained early in the next flush, and the
/// file leaves time order by as long as the preemption lasted.
fn flush_periodic() {
    lock().flush(Some(clock::now()));
}

/// The process whose writer this is: a `vfork` child shares the parent's memory (and
/// runs no fork handlers), and its `exec` or `_exit` must not end the parent's trace.
/// (Python's subprocess closes the child's descriptors first: the write failed and the
/// parent's trace stopped for good.)
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Records this process as the writer's owner: at load and in a forked child.
pub fn own() {
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
}

/// Whether the calling process may end the trace: not when it is a `vfork` child.
fn owns() -> bool {
    // SAFETY: getpid has no preconditions.
    OWNER.load(Ordering::Relaxed) == unsafe { libc::getpid() } as u32
}

/// Writes everything queued, then the end record. Later events (teardown in other
/// threads) are written as they come.
pub fn finish(reason: &str) {
    if holding() || !owns() {
        return;
    }
    FINISHING.store(true, Ordering::Relaxed);
    end(&mut lock(), reason);
}

/// Steps the writer has made (events and frames formatted, shards drained, writes
/// done): tells a busy writer from a stuck one.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

fn progressed() {
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

/// The writer's progress count: it changes while the writer works.
pub fn progress() -> u64 {
    PROGRESS.load(Ordering::Relaxed)
}

/// [`finish`], unless the writer, busy on another thread, makes no progress for
/// `stalled` (a write blocked on a hung file system) or has not let go after `at_most`:
/// then nothing more is written.
pub fn finish_within(reason: &str, stalled: Duration, at_most: Duration) {
    if holding() || !owns() {
        return;
    }
    FINISHING.store(true, Ordering::Relaxed);
    let start = std::time::Instant::now();
    let mut seen = PROGRESS.load(Ordering::Relaxed);
    let mut deadline = start + stalled;
    loop {
        if let Some(mut w) = try_lock() {
            end(&mut w, reason);
            return;
        }
        let now = std::time::Instant::now();
        let progress = PROGRESS.load(Ordering::Relaxed);
        if progress != seen {
            (seen, deadline) = (progress, now + stalled);
        }
        if now >= deadline || now >= start + at_most {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn end(w: &mut Locked, reason: &str) {
    // Synchronous from here on, before the last flush drains the shards: a thread whose
    // push lands in a shard after the drain took it (the final write, stacks named, can
    // take tens of milliseconds) takes that shard's lock after the drain released it, so
    // it sees the flag and writes its event itself. Set after the flush, events queued in
    // that window stayed in the queue until the process was gone.
    SYNC_WRITES.store(true, Ordering::Relaxed);
    w.flush(None);
    if let State::Open(_) = w.state {
        let end = End {
            t: clock::now(),
            events: w.written,
            reason: reason.to_string(),
            queue_peak_bytes: Some(crate::bound::peak()),
        };
        let mut line = JsonBuf::new();
        end.write_json(&mut line);
        w.write(line.as_bytes());
    }
}

/// An `exec` failed: the program goes on, and the writer thread writes again. (Events
/// stay synchronous: the end record is written, and later ones follow it.)
pub fn resume() {
    if owns() {
        FINISHING.store(false, Ordering::Relaxed);
    }
}

/// How long a fatal-signal handler waits for the writer thread to let go of the writer or
/// to create the file (a crash right after the first CUDA call comes before it), while
/// the writer makes no progress; and how long at most, progress or not. (A first write
/// names every frame: over 200 ms on a loaded machine.)
const SIGNAL_STALLED_NS: u64 = 1_000_000_000;
const SIGNAL_AT_MOST_NS: u64 = 10_000_000_000;

/// From a fatal-signal handler: no allocation, and no waiting beyond
/// [`SIGNAL_STALLED_NS`] without progress (the writer thread may itself wait for
/// something the crashed thread holds). If the writer is still busy then, or the file was
/// never opened, the events of the last flush interval are lost.
pub fn flush_from_signal(signal: i32) {
    if holding() {
        return;
    }
    let start = clock::monotonic_ns();
    let (mut seen, mut deadline) = (progress(), start + SIGNAL_STALLED_NS);
    let (mut w, fd) = loop {
        match WRITER.try_lock() {
            Ok(mut w) => match &mut w.state {
                State::Open(t) => match t.checked() {
                    Some(fd) => break (w, fd),
                    None => return,
                },
                State::Failed => return,
                State::Unopened if !THREAD_STARTED.load(Ordering::Relaxed) => return,
                State::Unopened => {}
            },
            Err(std::sync::TryLockError::Poisoned(_)) => return,
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        let now = clock::monotonic_ns();
        if progress() != seen {
            (seen, deadline) = (progress(), now + SIGNAL_STALLED_NS);
        }
        if now >= deadline || now >= start + SIGNAL_AT_MOST_NS {
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: nanosleep is async-signal-safe; valid pointer.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    };
    let mut line = JsonBuf::new();
    let mut failed = false;
    for q in &w.carry {
        line.clear();
        q.event(&w.carry_ips).write_json(&mut line);
        failed |= output::write_all(fd, line.as_bytes()).is_err();
    }
    let carried = w.carry.len();
    let n = carried
        + queue::try_drain(|e| {
            line.clear();
            e.write_json(&mut line);
            failed |= output::write_all(fd, line.as_bytes()).is_err();
        });
    w.written += n as u64;
    let mut reason = JsonBuf::new();
    reason.raw("signal ");
    reason.u64(signal as u64);
    line.clear();
    let reason = std::str::from_utf8(reason.as_bytes()).unwrap_or("signal");
    End::write_parts(clock::now(), w.written, reason, &mut line);
    if !failed {
        let _ = output::write_all(fd, line.as_bytes());
    }
}

impl Writer {
    /// Writes the queued events timed at or before `cut` (all with `None`).
    fn flush(&mut self, cut: Option<u64>) {
        let mut batch = std::mem::take(&mut self.batch);
        let mut ips = std::mem::take(&mut self.ips);
        ips.extend_from_slice(&self.carry_ips);
        batch.append(&mut self.carry);
        self.carry_ips.clear();
        queue::drain_into(&mut self.spares, &mut batch, &mut ips);
        progressed();
        batch.sort_by_key(|q| q.t);
        progressed();
        let keep = cut.map_or(batch.len(), |cut| batch.partition_point(|q| q.t <= cut));
        for q in &batch[keep..] {
            let start = self.carry_ips.len() as u32;
            self.carry_ips.extend_from_slice(q.words_in(&ips));
            self.carry.push(q.moved(start));
        }
        batch.truncate(keep);
        if !batch.is_empty() || crate::bound::lost() > self.lost_written {
            self.write_events(&mut batch, &ips);
        }
        batch.clear();
        ips.clear();
        self.batch = batch;
        self.ips = ips;
    }

    fn write_events(&mut self, batch: &mut [Queued], ips: &[u64]) {
        match self.state {
            State::Open(_) => {}
            State::Failed => return,
            State::Unopened => match crate::trace_file::open() {
                Ok(file) => self.state = State::Open(file),
                Err(msg) => {
                    self.state = State::Failed;
                    warn::once(&msg);
                    return;
                }
            },
        }
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        let lost = crate::bound::lost();
        if lost > self.lost_written {
            let mut line = JsonBuf::new();
            vramtrace_schema::Lost {
                t: clock::now(),
                calls: lost - self.lost_written,
            }
            .write_json(&mut line);
            text.extend_from_slice(line.as_bytes());
            self.lost_written = lost;
        }
        for (id, name) in crate::annotate::names_after(self.names_written) {
            let record = serde_json::json!({ "name": { "id": id, "text": name } });
            let _ = serde_json::to_writer(&mut text, &record);
            text.push(b'\n');
            self.names_written = id;
        }
        // Out of the writer while it writes in chunks; put back below.
        let mut stacks = self.stacks.take().unwrap_or_default();
        let mut symbols = self.symbols.take().unwrap_or_default();
        let mut formatted = 0u64;
        // Each stack is tagged with the unload epoch it was taken in; `dlclose` writes
        // what is queued before it unloads, so nearly all are named while still mapped.
        let now = crate::unload::unloads();
        let mut tagged = Vec::new();
        for q in batch.iter() {
            let mut e = q.event(ips);
            if q.len > 0 {
                let mut frames = q.stack(ips);
                let epoch = q.epoch as u64;
                if epoch > 0 {
                    tagged.clear();
                    tagged.extend(frames.iter().map(|&ip| intern::tagged(ip, epoch)));
                    frames = &tagged;
                }
                // A stack taken before an unload that came since: its addresses may now
                // be another library's, so its native frames are left unnamed.
                let current = epoch == now.min(u16::MAX as u64);
                e.stack = stacks.intern(frames, |node| {
                    write_node(&mut text, &mut symbols, &node, current)
                });
            }
            e.write_json(&mut text);
            formatted += 1;
            progressed();
            // Bounded writes: the text of a large batch is not held whole, and no write
            // is so large that a fork (which waits for the writer) waits long behind it.
            if text.len() >= WRITE_CHUNK {
                if !self.write(&text) {
                    break;
                }
                self.written += std::mem::take(&mut formatted);
                text.clear();
            }
        }
        if !text.is_empty() && self.write(&text) {
            self.written += formatted;
        }
        text.clear();
        self.text = text;
        self.stacks = Some(stacks);
        self.symbols = Some(symbols);
    }

    /// Writes to the trace file, after checking the descriptor is still the trace's.
    fn write(&mut self, bytes: &[u8]) -> bool {
        let State::Open(file) = &mut self.state else {
            return false;
        };
        let Some(fd) = file.checked() else {
            self.state = State::Failed;
            warn::once("the trace file was closed by the program and is gone or replaced: no more events are written");
            return false;
        };
        let written = output::write_all(fd, bytes);
        progressed();
        match written {
            Ok(()) => {
                file.wrote(bytes.len());
                true
            }
            Err(e) => {
                // The writer knows why the trace stops here: it says so in a last end
                // record (a trace without one reads as a killed process), after cutting
                // the failed write back so that the record has room and follows a whole
                // line. One try: if even that fails, the trace ends at its last whole line.
                file.cut_back(fd);
                let mut line = JsonBuf::new();
                End {
                    t: clock::now(),
                    events: self.written,
                    reason: format!("write failed: {}", failure(&e)),
                    queue_peak_bytes: Some(crate::bound::peak()),
                }
                .write_json(&mut line);
                let _ = output::write_all(fd, line.as_bytes());
                self.state = State::Failed;
                warn::once(&format!("cannot write the trace: {e}"));
                false
            }
        }
    }
}

/// The most bytes given to one write.
const WRITE_CHUNK: usize = 1 << 20;

/// Why a write failed, in words that need no escaping in a JSON string.
fn failure(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => "no space left on device".into(),
        Some(libc::EDQUOT) => "disk quota exceeded".into(),
        Some(libc::EFBIG) => "file size limit reached".into(),
        Some(code) => format!("os error {code}"),
        None => "short write".into(),
    }
}

/// The records a new stack node needs before the event that uses it: its frame (once per
/// address, with the names the symboliser found) and the node itself.
fn write_node(text: &mut Vec<u8>, symbols: &mut Symbolizer, node: &NewNode, current: bool) {
    if node.new_ip {
        let f = if current || intern::is_python(node.ip) {
            symbols.frame(intern::address(node.ip))
        } else {
            crate::stack::symbolize::FrameInfo {
                module: "?".into(),
                offset: intern::address(node.ip),
                ..Default::default()
            }
        };
        let frame = vramtrace_schema::Frame {
            ip: node.ip,
            module: f.module,
            offset: f.offset,
            function: f.function,
            file: f.file,
            line: f.line,
            inlined: f.inlined,
        };
        let _ = serde_json::to_writer(&mut *text, &serde_json::json!({ "frame": frame }));
        text.push(b'\n');
        progressed();
    }
    text.raw("{\"node\":{\"id\":");
    text.u64(node.id);
    text.raw(",\"parent\":");
    text.u64(node.parent);
    text.raw(",\"ip\":");
    text.u64(node.ip);
    text.raw("}}\n");
}

/// Every lock the forking thread holds across a fork, in the order they are taken: a
/// child must not inherit one half-way through a write, a push, a walk or a scan.
/// Dropping it releases them all.
struct Held {
    writer: Locked,
    _names: crate::annotate::ForkHold,
    _codes: crate::stack::python::ForkHold,
    queue: queue::ForkHold,
    _stacks: crate::stack::capture::ForkHold,
    _modules: crate::stack::modules::ForkHold,
    wake: MutexGuard<'static, bool>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// fork: hold the writer so the child never inherits it half-way through a write.
pub fn before_fork() {
    // The first use of the thread-local that holds the guards registers its destructor,
    // which takes the loader's lock: done before any lock is taken (a thread in dlopen
    // holding the loader's lock may be waiting for ours).
    let _ = HELD.try_with(|_| ());
    let held = Held {
        writer: lock(),
        _names: crate::annotate::hold_for_fork(),
        _codes: crate::stack::python::hold_for_fork(),
        queue: queue::hold_for_fork(),
        _stacks: crate::stack::capture::hold_for_fork(),
        _modules: crate::stack::modules::hold_for_fork(),
        wake: WAKE.0.lock().unwrap_or_else(|e| e.into_inner()),
    };
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(held));
}

pub fn after_fork_parent() {
    let _ = HELD.try_with(|h| h.borrow_mut().take());
}

/// fork, in the child: a fresh writer with its own file, no thread until its first event.
pub fn after_fork_child() {
    crate::unload::after_fork_child();
    let _ = HELD.try_with(|h| {
        if let Some(Held {
            writer: mut w,
            mut queue,
            wake: mut woken,
            ..
        }) = h.borrow_mut().take()
        {
            queue.clear();
            if let State::Open(file) = &w.state {
                // The parent's descriptor, not the child's to write.
                file.close_if_ours();
            }
            w.state = State::Unopened;
            w.written = 0;
            w.stacks = None;
            w.names_written = 0;
            w.lost_written = 0;
            // Held-back events are the parent's to write.
            w.carry.clear();
            w.carry_ips.clear();
            *woken = false;
        }
    });
    THREAD_STARTED.store(false, Ordering::Relaxed);
    FIRST_FLUSHED.store(false, Ordering::Relaxed);
    WRITER_TID.store(0, Ordering::Relaxed);
    crate::thread::after_fork_child();
    SYNC_WRITES.store(false, Ordering::Relaxed);
    FINISHING.store(false, Ordering::Relaxed);
    own();
}
