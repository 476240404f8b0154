//! The memoised walk against a walk from scratch, in frames built to trip it: each test
//! takes a stack twice through the memo and once more with the thread's memo dropped, and
//! requires the second and the third to be the same.

use super::*;
use std::hint::black_box;

thread_local! {
    static TAKEN: std::cell::RefCell<Vec<Vec<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes the stack of its caller's chain, as a hook does.
#[inline(never)]
extern "C" fn take() {
    let at = crate::stack::here!();
    let mut out = [0u64; 64];
    let (lo, hi) = stack_bounds();
    let (n, _) = capture_with(&mut out, lo.max(at.sp), hi, at);
    let v = if n == usize::MAX {
        vec![u64::MAX]
    } else {
        out[..n].to_vec()
    };
    TAKEN.with(|t| t.borrow_mut().push(v));
}

fn forget_walks() {
    MEMO.with(|m| *m.borrow_mut() = None);
}

/// Runs `calls` on a thread of its own and returns the stacks `take` took there.
fn on_a_thread(calls: fn()) -> Vec<Vec<u64>> {
    std::thread::spawn(move || {
        calls();
        TAKEN.with(|t| t.borrow().clone())
    })
    .join()
    .unwrap()
}

// A frame shaped like libffi's ffi_call_unix64: CFA = rbp + 32 with rbp saved at CFA-16, a
// rule framehop cannot cache and works out on every step; the words below its return
// address hold a flag and a stack pointer, so a frame-pointer walk through it goes wrong.
std::arch::global_asm!(
    ".globl vramtrace_test_ffi_like",
    ".type vramtrace_test_ffi_like,@function",
    "vramtrace_test_ffi_like:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_def_cfa_offset 16",
    ".cfi_offset rbp, -16",
    "lea rbp, [rsp - 16]",
    ".cfi_def_cfa rbp, 32",
    "sub rsp, 16",
    "mov qword ptr [rsp], 3",
    "lea rcx, [rsp + 8]",
    "mov qword ptr [rsp + 8], rcx",
    "call rdi",
    "lea rsp, [rbp + 16]",
    "pop rbp",
    ".cfi_def_cfa rsp, 8",
    "ret",
    ".cfi_endproc",
);

// No unwind information at all, so framehop's frame-pointer rule applies; rbp is a real
// frame pointer when `valid` is set, else 0x10 (below sp: that rule fails on it).
std::arch::global_asm!(
    ".globl vramtrace_test_no_cfi",
    ".type vramtrace_test_no_cfi,@function",
    "vramtrace_test_no_cfi:",
    "push rbp",
    "push rbx",
    "mov rbx, rsp",
    "sub rsp, 8",
    "lea rbp, [rsp + 16]",
    "test rsi, rsi",
    "jnz 2f",
    "mov rbp, 0x10",
    "2:",
    "call rdi",
    "mov rsp, rbx",
    "pop rbx",
    "pop rbp",
    "ret",
);

extern "C" {
    fn vramtrace_test_ffi_like(f: extern "C" fn());
    fn vramtrace_test_no_cfi(f: extern "C" fn(), valid: u64);
}

#[inline(never)]
fn through_ffi_at_depth(d: u32) {
    if black_box(d) == 0 {
        // SAFETY: calls `take` with a frame of its own around the call.
        unsafe { vramtrace_test_ffi_like(take) };
    } else {
        through_ffi_at_depth(d - 1);
        black_box(());
    }
}

/// The bp probe runs a step with a made-up bp; had it shared the walk's rule cache, the
/// fallback rule cached for the ffi frame then would have invented a frame later.
#[test]
fn the_bp_probe_does_not_change_what_later_walks_find() {
    let taken = on_a_thread(|| {
        through_ffi_at_depth(5);
        through_ffi_at_depth(9);
        forget_walks();
        through_ffi_at_depth(9);
    });
    // (In this test binary every frame of its own is "vramtrace's" and left out: what
    // remains are libc's thread frames, unless a frame was invented.)
    assert!(!taken[2].is_empty(), "{taken:x?}");
    assert_eq!(taken[1], taken[2], "memoised vs from scratch: {taken:x?}");
}

/// A step that fails with a bp below sp fails the same with the probe's bp: that says
/// nothing about bp, and a later walk with a valid bp must not take the failed walk's end.
#[test]
fn a_step_that_failed_is_not_taken_for_one_that_ignores_bp() {
    let taken = on_a_thread(|| {
        // SAFETY: calls `take` inside a frame of its own.
        unsafe {
            vramtrace_test_no_cfi(take, 0);
            vramtrace_test_no_cfi(take, 1);
        }
        forget_walks();
        // SAFETY: as above.
        unsafe { vramtrace_test_no_cfi(take, 1) };
    });
    assert!(!taken[2].is_empty(), "{taken:x?}");
    assert_eq!(taken[1], taken[2], "memoised vs from scratch: {taken:x?}");
}
