//! Taking the caller's return addresses on the hot path.

use super::modules;
use super::python::{self, PyStack};
use super::walk::{self, End, Memo, Start, Walker};
use super::Registers;
use framehop::x86_64::UnwindRegsX86_64;
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockWriteGuard};

struct State {
    unwinder: Walker,
    /// Which scan this is: a thread's memoised walk from an older one is not reused.
    generation: u64,
    /// Runtime addresses of every known module, sorted by start.
    ranges: Vec<Range<u64>>,
    /// This library's own range: its frames (the hook, the recorder) are left out.
    ours: Range<u64>,
}

static STATE: RwLock<Option<State>> = RwLock::new(None);
/// Monotonic ns of the last module rescan, to rescan at most every few ms when code
/// outside every known module (a new `dlopen`, JIT code) shows up.
static LAST_SCAN_NS: AtomicU64 = AtomicU64::new(0);
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Changes whenever a module table is built.
pub fn table_builds() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}
const RESCAN_INTERVAL_NS: u64 = 5_000_000;

thread_local! {
    static MEMO: RefCell<Option<Box<Memo>>> = const { RefCell::new(None) };
    /// This thread's stack bounds: reads outside them are refused, never faulted.
    static STACK: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The module table of what is loaded now, with the token it was taken under; none while
/// a `dlclose` is under way. Built outside the lock: dl_iterate_phdr takes the loader's
/// lock, and a thread inside dlopen (a library constructor allocating) may be waiting on
/// ours.
fn build() -> Option<(u64, State)> {
    let token = crate::dlclose::quiet()?;
    Some((token, scan()))
}

fn scan() -> State {
    let mut unwinder = Walker::new();
    let mut ranges = Vec::new();
    let ours_addr = build as *const () as u64;
    let mut ours = 0..0;
    for m in modules::loaded() {
        if m.range.contains(&ours_addr) {
            ours = m.range.clone();
        }
        ranges.push(m.range.clone());
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: m.text.as_ref().map(|t| t.0.clone()),
            text: m.text.as_ref().map(|t| t.1),
            eh_frame_svma: m.eh_frame.as_ref().map(|t| t.0.clone()),
            eh_frame: m.eh_frame.as_ref().map(|t| t.1),
            eh_frame_hdr_svma: m.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
            eh_frame_hdr: m.eh_frame_hdr.as_ref().map(|t| t.1),
            ..Default::default()
        };
        unwinder.add_module(Module::new(m.path, m.range, m.base, info));
    }
    ranges.sort_by_key(|r| r.start);
    State {
        unwinder,
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        ranges,
        ours,
    }
}

fn known(ranges: &[Range<u64>], addr: u64) -> bool {
    let i = ranges.partition_point(|r| r.start <= addr);
    i > 0 && ranges[i - 1].contains(&addr)
}

fn stack_bounds() -> (u64, u64) {
    let b = STACK.try_with(Cell::get).unwrap_or((0, 0));
    if b.1 != 0 {
        return b;
    }
    // SAFETY: attr is initialised by pthread_getattr_np before use and destroyed after.
    let b = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if !ok {
            return (0, 0);
        }
        (addr as u64, addr as u64 + size as u64)
    };
    let _ = STACK.try_with(|s| s.set(b));
    b
}

/// Fills `out` with the return addresses of the calling thread from the hook whose
/// registers are `at` outward, innermost first, leaving out vramtrace's own frames.
/// Returns how many were written (0 when the stack cannot be taken right now, e.g. during
/// thread teardown) and the unload epoch of the module table used.
pub fn capture(out: &mut [u64], at: Registers) -> (usize, u64) {
    let (n, epoch) = capture_native(out, at);
    if !python::present() {
        return (n, epoch);
    }
    (with_python(out, n), epoch)
}

/// Splices the calling thread's Python frames into its `n` native ones.
#[inline(never)]
fn with_python(out: &mut [u64], n: usize) -> usize {
    let Some(_python) = crate::guard::PythonCapture::begin() else {
        return n;
    };
    // Python frames replace the interpreter's own native frames, from the first one
    // inward of the caller (e.g. ctypes -> libffi -> the eval loop -> ...). Only as many
    // are read as fit; nothing is written unless some were read.
    let at = out[..n]
        .iter()
        .position(|&ip| python::in_interpreter(ip))
        .unwrap_or(n);
    match python::capture(&mut out[at..]) {
        PyStack::Absent => n,
        PyStack::NoGil => {
            if n < out.len() {
                out[n] = python::NO_GIL;
                n + 1
            } else {
                n
            }
        }
        PyStack::Frames(k) => at + k,
    }
}

fn capture_native(out: &mut [u64], at: Registers) -> (usize, u64) {
    if out.is_empty() {
        return (0, 0);
    }
    let (lo, hi) = stack_bounds();
    if hi == 0 {
        return (0, 0);
    }
    // Callers' frames lie above the hook's sp: nothing below it is read. (The main
    // thread's bounds come from the stack rlimit and can reach below what is mapped.)
    let lo = lo.max(at.sp);
    let mut taken = capture_with(out, lo, hi, at);
    if taken.0 == usize::MAX {
        rescan();
        taken = capture_with(out, lo, hi, at);
    }
    if taken.0 == usize::MAX {
        (0, 0)
    } else {
        taken
    }
}

/// `usize::MAX` asks for a rescan: a frame lay outside every known module. With the
/// count, the unload epoch of the table used, read under the table's lock: the frames'
/// addresses mean what they meant then.
fn capture_with(out: &mut [u64], lo: u64, hi: u64, at: Registers) -> (usize, u64) {
    // The memo's first use registers its destructor, which takes the loader's lock: not
    // with the table's lock held (a dlclose holding the loader's lock may wait for it).
    // Once the thread's destructors ran it, the thread is ending (a pthread key
    // destructor, an atexit handler of the main thread): a memo of its own, for this walk.
    let memo_gone = MEMO.try_with(|_| ()).is_err();
    let mut guard = STATE.read().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        drop(guard);
        if let Some(built) = build() {
            keep(built, |current| current.is_none());
        }
        guard = STATE.read().unwrap_or_else(|e| e.into_inner());
    }
    // Checked with the lock held: a `dlclose` that began has dropped the table (or waits
    // for this walk to end before its library goes), and while it runs nothing is walked.
    if crate::dlclose::quiet().is_none() {
        return (0, 0);
    }
    let Some(state) = guard.as_ref() else {
        return (0, 0);
    };
    let epoch = crate::dlclose::unloads();
    let mut walk_with = |memo: &mut Memo| {
        let mut read = |addr: u64| {
            if addr < lo || addr.saturating_add(8) > hi || !addr.is_multiple_of(8) {
                return Err(());
            }
            // SAFETY: inside this thread's stack, aligned.
            Ok(unsafe { std::ptr::read(addr as *const u64) })
        };
        let start = Start {
            regs: UnwindRegsX86_64::new(at.ip, at.sp, at.bp),
            generation: state.generation,
            ours: &state.ours,
        };
        let (n, end) = walk::walk(&state.unwinder, memo, start, out, &mut read);
        // The walk stopped: normal at the stack's end, or a frame in code no known module
        // holds (a library loaded since the last scan). Only then rescan.
        let unknown = end == End::Stopped && n > 0 && !known(&state.ranges, out[n - 1]);
        if unknown && n < out.len() && rescan_due() {
            usize::MAX
        } else {
            n
        }
    };
    let n = if memo_gone {
        walk_with(&mut Box::new(Memo::new()))
    } else {
        let kept = MEMO.try_with(|memo| {
            let mut memo = memo.try_borrow_mut().ok()?;
            Some(walk_with(memo.get_or_insert_with(|| Box::new(Memo::new()))))
        });
        kept.ok().flatten().unwrap_or(0)
    };
    (n, epoch)
}

fn rescan_due() -> bool {
    let now = crate::clock::monotonic_ns();
    now.saturating_sub(LAST_SCAN_NS.load(Ordering::Relaxed)) > RESCAN_INTERVAL_NS
}

fn rescan() {
    if let Some(built) = build() {
        keep(built, |_| true);
    }
}

/// Installs a table built by [`build`] when `wanted` says so of the current one, unless a
/// `dlclose` began since `built` started (it may list a library that is gone).
fn keep(built: (u64, State), wanted: impl FnOnce(&Option<State>) -> bool) {
    let (token, state) = built;
    let mut w = STATE.write().unwrap_or_else(|e| e.into_inner());
    if wanted(&w) && crate::dlclose::still_quiet(token) {
        *w = Some(state);
        LAST_SCAN_NS.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
    }
}

/// A library may be unloaded: drops the module table, once every walk using it is done.
pub fn forget_modules() {
    *STATE.write().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The table's lock, held across a fork by the forking thread: a walk or a rebuild
/// half-way in another thread would leave it locked in the child for good.
pub struct ForkHold(#[allow(dead_code)] RwLockWriteGuard<'static, Option<State>>);

pub fn hold_for_fork() -> ForkHold {
    ForkHold(STATE.write().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod walk_tests;
