//! The frame-by-frame walk, memoised per thread.
//!
//! A step of the unwinder is a pure function of the frame's address, the registers it reads
//! (framehop 0.16's x86-64 rules and its DWARF evaluation read only ip, sp and bp) and the
//! stack words it reads. So when a walk reaches a frame in the same state as a frame of this
//! thread's previous walk, and every stack word the previous walk read from there outward
//! still holds the value it read, the rest of the walk is the previous walk's rest: it is
//! taken, not computed. A loop allocating from one place unwinds only the frames below the
//! first that matches (often none) and compares one or two words per frame above it.
//!
//! Matching is exact, never a guess: a caller that changed (the same function at the same
//! stack depth, called from elsewhere) changed a return address the previous walk read, so
//! the comparison fails and the walk goes on.
//!
//! bp is compared only where it matters. Code built without frame pointers uses rbp as a
//! plain register, so the bp a hook sees differs from call to call (it may hold the very
//! pointer being freed), and so does every frame's until one restores it. Each step is
//! therefore run a second time with another bp: if the outcome (return address, sp, the
//! words read, the error if any) is the same, the step does not use bp, and it either
//! passes bp on or replaces it with a word it read. A frame's own bp then matters only if
//! a step from it outward uses bp before one replaces it. (In framehop's rules a step that
//! uses bp takes sp from it - frame-pointer and rbp-based DWARF rules - so a second bp
//! always shows.)
//!
//! A walk is kept outermost frame first, and its reads likewise, so that the part another
//! walk shares - the callers - stays where it is and only the inner frames are replaced.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};
use std::ops::Range;

use super::modules::MappedBytes;

pub type Cache = CacheX86_64<MustNotAllocateDuringUnwind>;
pub type Walker = UnwinderX86_64<MappedBytes, MustNotAllocateDuringUnwind>;

/// How a walk ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    /// The unwinder found the outermost frame.
    Outermost,
    /// The unwinder could not go on (no rule, an unreadable word, a null return address).
    Stopped,
    /// `out` was full.
    Full,
}

/// One frame of a walk, with the state the step out of it started from.
#[derive(Clone, Copy)]
struct Step {
    state: State,
    /// Whether the frame goes into the stack (vramtrace's own frames do not).
    kept: bool,
    /// In a kept walk: how many kept frames lie from this one outward (itself included).
    kept_outward: u32,
    /// In a kept walk: how many reads, counted from the outermost, were made from this
    /// frame outward. While walking: where this step's reads start.
    reads: u32,
    /// What the step out of this frame does with the bp it starts from.
    bp_use: BpUse,
    /// In a kept walk: whether the rest of the walk from this frame depends on its bp.
    needs_bp: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BpUse {
    /// The step's outcome depends on bp (or nobody checked).
    Uses,
    /// The step does not look at bp and hands it on unchanged.
    Passes,
    /// The step does not look at bp and replaces it by a word it read (or nothing was
    /// derived from the frame: the walk ended there with `out` full).
    Replaces,
}

/// The bit flipped in bp for the second run of a step.
const PROBE_BIT: u64 = 1 << 44;

/// The addresses one step reads, for comparing its two runs.
struct Addresses {
    at: [u64; 16],
    len: usize,
    overflow: bool,
}

impl Addresses {
    fn new() -> Addresses {
        Addresses {
            at: [0; 16],
            len: 0,
            overflow: false,
        }
    }

    fn push(&mut self, addr: u64) {
        match self.at.get_mut(self.len) {
            Some(slot) => *slot = addr,
            None => self.overflow = true,
        }
        self.len += 1;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct State {
    address: u64,
    is_return: bool,
    ip: u64,
    sp: u64,
    bp: u64,
}

impl State {
    /// Whether a walk from `self` goes on as one from `other` would, given the words read.
    fn same_walk(&self, other: &State, needs_bp: bool) -> bool {
        (self.address, self.is_return, self.ip, self.sp)
            == (other.address, other.is_return, other.ip, other.sp)
            && (!needs_bp || self.bp == other.bp)
    }
}

/// A successful read of a stack word. (A refused one depends only on its address, which
/// the earlier reads determine, so it needs no check.)
type Read = (u64, u64);

impl Walk {
    /// Becomes `from` without its `k` innermost frames.
    fn copy_outer(&mut self, from: &Walk, k: usize) {
        let outer = from.steps.len() - k;
        let joint = from.steps[outer - 1];
        self.clear();
        self.generation = from.generation;
        self.steps.extend_from_slice(&from.steps[..outer]);
        self.reads
            .extend_from_slice(&from.reads[..joint.reads as usize]);
        self.kept
            .extend_from_slice(&from.kept[..joint.kept_outward as usize]);
        self.end = from.end;
    }

    fn clear(&mut self) {
        self.steps.clear();
        self.reads.clear();
        self.kept.clear();
        self.end = None;
    }
}

#[derive(Default)]
struct Walk {
    /// The module table the walk used: after a rescan a thread starts afresh.
    generation: u64,
    /// Outermost first.
    steps: Vec<Step>,
    /// Outermost first.
    reads: Vec<Read>,
    /// The addresses of the kept frames, outermost first: a joined walk copies them in
    /// one go.
    kept: Vec<u64>,
    /// How the kept walk ended (its outermost frame); `None` before the first walk.
    end: Option<End>,
}

/// Walks a thread keeps: two, so that a loop alternating between two places (an
/// allocation here, its free there) joins one of them at its first frame.
const WAYS: usize = 2;
// `walk` hands a variant to "the other way".
const _: () = assert!(WAYS == 2);

/// Frames one walk steps through at most (kept or not): a cycle of frames that do not
/// advance cannot make it run on.
const MAX_STEPS: usize = 4 * super::MAX_DEPTH;

/// A thread's unwinder caches, its last walks and room for the next.
pub struct Memo {
    cache: Cache,
    /// The bp probe's own: framehop caches its fallback rule for an address whose rule
    /// failed, and a probe run with a made-up bp fails where the real one would not (a
    /// frame whose DWARF rule framehop recomputes every time, as libffi's).
    probe_cache: Cache,
    /// The module table the caches were filled from: after a rescan they start afresh
    /// (framehop tells tables apart by a 16-bit generation, which rescans can wrap).
    cache_generation: u64,
    ways: [Walk; WAYS],
    /// The way joined or written most recently; the other is replaced next.
    newest: usize,
    next: Walk,
}

impl Memo {
    pub fn new() -> Memo {
        Memo {
            cache: Cache::new_in(),
            probe_cache: Cache::new_in(),
            cache_generation: 0,
            ways: Default::default(),
            newest: 0,
            next: Walk::default(),
        }
    }
}

/// Where a walk looks for its joint in a kept walk.
#[derive(Clone, Copy)]
struct Cursor {
    /// The candidate (an index from the kept walk's innermost frame), found by sp, which
    /// only grows along a walk.
    j: usize,
    /// The kept walk's reads before this one (outermost first) still hold...
    checked: u32,
    /// ...and this one does not (`u32::MAX`: none known).
    changed: u32,
}

impl Walk {
    /// The `k` (from its innermost frame) of a frame of this walk in `state`, all of whose
    /// reads outward still hold, with `room` kept frames from there on (or the whole rest).
    fn joint(&self, at: &mut Cursor, state: &State, room: usize) -> Option<usize> {
        let len = self.steps.len();
        while at.j < len && self.steps[len - 1 - at.j].state.sp < state.sp {
            at.j += 1;
        }
        let mut k = at.j;
        while k < len && self.steps[len - 1 - k].state.sp == state.sp {
            let step = &self.steps[len - 1 - k];
            if step.state.same_walk(state, step.needs_bp) && step.reads <= at.changed {
                if step.reads > at.checked {
                    let from = at.checked as usize;
                    match unchanged(&self.reads[from..step.reads as usize]) {
                        None => at.checked = step.reads,
                        Some(i) => {
                            at.changed = (from + i) as u32;
                            at.checked = at.changed;
                        }
                    }
                }
                let holds = step.reads <= at.checked;
                if holds && (self.end != Some(End::Full) || step.kept_outward as usize >= room) {
                    return Some(k);
                }
            }
            k += 1;
        }
        None
    }
}

/// Where the walk starts.
pub struct Start<'a> {
    pub regs: UnwindRegsX86_64,
    pub generation: u64,
    /// vramtrace's own code: walked through, left out of `out`.
    pub ours: &'a Range<u64>,
}

/// Walks from `start`, writing kept frame addresses innermost first into `out`. Returns
/// how many it wrote and how the walk ended. `read` reads one stack word, refusing any
/// outside this thread's stack.
pub fn walk(
    unwinder: &Walker,
    memo: &mut Memo,
    start: Start,
    out: &mut [u64],
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> (usize, End) {
    if memo.cache_generation != start.generation {
        memo.cache = Cache::new_in();
        memo.probe_cache = Cache::new_in();
        memo.cache_generation = start.generation;
    }
    let Memo {
        cache,
        probe_cache,
        ways,
        newest,
        next,
        ..
    } = memo;
    for way in ways.iter_mut() {
        if way.generation != start.generation {
            way.clear();
            way.generation = start.generation;
        }
    }
    next.steps.clear();
    next.reads.clear();
    let mut regs = start.regs;
    let mut address = FrameAddress::from_instruction_pointer(regs.ip());
    let mut n = 0;
    let mut cursors = [Cursor {
        j: 0,
        checked: 0,
        changed: u32::MAX,
    }; WAYS];
    let end = loop {
        let state = State {
            address: address.address(),
            is_return: address.is_return_address(),
            ip: regs.ip(),
            sp: regs.sp(),
            bp: regs.bp(),
        };
        for i in 0..WAYS {
            let w = (*newest + i) % WAYS;
            if let Some(k) = ways[w].joint(&mut cursors[w], &state, out.len() - n) {
                if k == 0 {
                    *newest = w;
                    return join(&mut ways[w], next, out, n);
                }
                // A variant of a kept walk (other inner frames): it goes into the other
                // way, so that a loop alternating between the two finds both.
                let other = (w + 1) % WAYS;
                let [a, b] = ways.each_mut();
                let (from, to) = if w == 0 { (&*a, b) } else { (&*b, a) };
                to.copy_outer(from, k);
                *newest = other;
                return join(to, next, out, n);
            }
        }
        if next.steps.len() == MAX_STEPS {
            break End::Stopped;
        }
        let kept = !start.ours.contains(&state.address);
        next.steps.push(Step {
            state,
            kept,
            kept_outward: 0,
            reads: next.reads.len() as u32,
            bp_use: BpUse::Replaces,
            needs_bp: true,
        });
        if kept {
            out[n] = state.address;
            n += 1;
            if n == out.len() {
                break End::Full;
            }
        }
        let before = regs;
        let mut seen = Addresses::new();
        let mut recorded = |addr: u64| {
            seen.push(addr);
            let value = read(addr);
            if let Ok(v) = value {
                next.reads.push((addr, v));
            }
            value
        };
        let result = unwinder.unwind_frame(address, &mut regs, cache, &mut recorded);
        let bp_use = probe(
            unwinder,
            probe_cache,
            address,
            &before,
            &regs,
            &result,
            &seen,
            read,
        );
        if let Some(step) = next.steps.last_mut() {
            step.bp_use = bp_use;
        }
        match result {
            Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                Some(a) => address = a,
                None => break End::Stopped,
            },
            Ok(None) => break End::Outermost,
            Err(_) => break End::Stopped,
        }
    };
    // Nothing matched: this walk, turned outermost first, replaces the older kept one.
    let w = (*newest + 1) % WAYS;
    *newest = w;
    ways[w].clear();
    keep_prefix(&mut ways[w], next);
    ways[w].end = Some(end);
    (n, end)
}

/// Runs the step from `before` again with another bp and says what the step does with bp:
/// the same outcome (result, sp, ip, the addresses read) means it does not use it.
#[allow(clippy::too_many_arguments)]
fn probe(
    unwinder: &Walker,
    cache: &mut Cache,
    address: FrameAddress,
    before: &UnwindRegsX86_64,
    after: &UnwindRegsX86_64,
    result: &Result<Option<u64>, framehop::Error>,
    seen: &Addresses,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> BpUse {
    // A step that failed may fail the same way with any bp (a frame-pointer rule whose bp
    // lies below sp), and with the right one go on: only a success tells.
    if seen.overflow || result.is_err() {
        return BpUse::Uses;
    }
    let mut regs = *before;
    regs.set_bp(before.bp() ^ PROBE_BIT);
    let mut i = 0;
    let mut same_reads = true;
    let mut again = |addr: u64| {
        same_reads &= seen.at[..seen.len].get(i) == Some(&addr);
        i += 1;
        read(addr)
    };
    let second = unwinder.unwind_frame(address, &mut regs, cache, &mut again);
    if !same_reads || i != seen.len || second != *result {
        return BpUse::Uses;
    }
    if (regs.sp(), regs.ip()) != (after.sp(), after.ip()) {
        return BpUse::Uses;
    }
    if regs.bp() == after.bp() {
        BpUse::Replaces
    } else if after.bp() == before.bp() && regs.bp() == before.bp() ^ PROBE_BIT {
        BpUse::Passes
    } else {
        BpUse::Uses
    }
}

/// The first of `reads` whose word changed since, or `None`.
fn unchanged(reads: &[Read]) -> Option<usize> {
    // SAFETY: each address was read successfully from this thread's stack, which stays
    // mapped while the thread runs, and is 8-aligned (the read refuses anything else).
    let word = |&(addr, value): &Read| unsafe { std::ptr::read(addr as *const u64) } ^ value;
    // One pass without a branch per word (nearly every check passes), a second to find
    // the word that changed.
    if reads.iter().fold(0, |d, r| d | word(r)) == 0 {
        return None;
    }
    reads.iter().position(|r| word(r) != 0)
}

/// Takes `last` from its last step outward into `out` (after the `n` frames already
/// there), and replaces its inner frames with this walk's (`next`).
fn join(last: &mut Walk, next: &mut Walk, out: &mut [u64], n: usize) -> (usize, End) {
    let outer = last.steps.len();
    let joint = last.steps[outer - 1];
    let shared = joint.kept_outward as usize;
    // What a walk from scratch says: it stops as soon as `out` is full. The frames beyond
    // stay in `last`: they were checked like the rest.
    let (take, end) = if shared >= out.len() - n {
        (out.len() - n, End::Full)
    } else {
        (shared, last.end.unwrap_or(End::Stopped))
    };
    for (o, a) in out[n..n + take]
        .iter_mut()
        .zip(last.kept[shared - take..shared].iter().rev())
    {
        *o = *a;
    }
    last.steps.truncate(outer);
    last.reads.truncate(joint.reads as usize);
    last.kept.truncate(shared);
    keep_prefix(last, next);
    (n + take, end)
}

/// Appends the walk in `next` (innermost first, `reads` as start indices) to `last`'s
/// outer frames, turned outermost first.
fn keep_prefix(last: &mut Walk, next: &Walk) {
    let base = last.reads.len() as u32;
    let total = next.reads.len() as u32;
    let mut kept = last.kept.len() as u32;
    let mut outer_needs_bp = last.steps.last().is_some_and(|s| s.needs_bp);
    for s in next.steps.iter().rev() {
        if s.kept {
            last.kept.push(s.state.address);
            kept += 1;
        }
        let needs_bp = match s.bp_use {
            BpUse::Uses => true,
            BpUse::Passes => outer_needs_bp,
            BpUse::Replaces => false,
        };
        outer_needs_bp = needs_bp;
        last.steps.push(Step {
            reads: base + total - s.reads,
            kept_outward: kept,
            needs_bp,
            ..*s
        });
    }
    last.reads.extend(next.reads.iter().rev());
}
