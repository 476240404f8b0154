//! `execl`, `execlp` and `execle`: glibc builds the argument array and calls its own
//! `execve`/`execvpe` inside libc, which no preloaded library sees, so the events since
//! the last flush were lost and the image ended without an end record. These stand-ins
//! build the array the same way and call vramtrace's [`execve`](super::ends::execve) and
//! [`execvp`](super::ends::execvp), which write first.
//!
//! Stable Rust cannot define a C variadic function, so each is a small naked trampoline
//! (x86-64 System V): it stores the six argument registers in its frame and passes
//! their address, with that of the caller's stack arguments, to a function that reads
//! the arguments in order as `va_arg` would (every argument here is a pointer). Other
//! architectures keep glibc's functions.
#![cfg(target_arch = "x86_64")]
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int};

/// Pointer arguments of a variadic call, in order: six registers, then the stack.
struct Args {
    registers: *const usize,
    stack: *const usize,
    next: usize,
}

impl Args {
    fn new(registers: *const usize, stack: *const usize) -> Args {
        Args {
            registers,
            stack,
            next: 0,
        }
    }

    unsafe fn next(&mut self) -> usize {
        let i = self.next;
        self.next += 1;
        if i < 6 {
            *self.registers.add(i)
        } else {
            *self.stack.add(i - 6)
        }
    }
}

/// Arguments up to this many are gathered on the stack (a `vfork` child must not
/// allocate); longer lists, rare, in a vector.
const ON_STACK: usize = 256;

/// Reads `path, arg0, ..., NULL` (and `envp` after the NULL when `with_env`) and calls
/// `then(path, argv, envp)`; `envp` is the program's `environ` otherwise.
unsafe fn gather(
    mut args: Args,
    with_env: bool,
    then: unsafe fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int,
) -> c_int {
    extern "C" {
        static environ: *const *const c_char;
    }
    let path = args.next() as *const c_char;
    let mut count = Args { ..args };
    let mut n = 0;
    while count.next() != 0 {
        n += 1;
    }
    let mut small = [std::ptr::null::<c_char>(); ON_STACK];
    let mut large = Vec::new();
    let argv: &mut [*const c_char] = if n < ON_STACK {
        &mut small[..n + 1]
    } else {
        large.resize(n + 1, std::ptr::null());
        &mut large
    };
    for slot in argv.iter_mut().take(n) {
        *slot = args.next() as *const c_char;
    }
    args.next(); // the NULL
    let envp = if with_env {
        args.next() as *const *const c_char
    } else {
        environ
    };
    then(path, argv.as_ptr(), envp)
}

unsafe fn to_execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    super::ends::execve(path, argv, envp)
}

unsafe fn to_execvp(
    file: *const c_char,
    argv: *const *const c_char,
    _: *const *const c_char,
) -> c_int {
    super::ends::execvp(file, argv)
}

unsafe extern "C" fn execl_args(registers: *const usize, stack: *const usize) -> c_int {
    gather(Args::new(registers, stack), false, to_execve)
}

unsafe extern "C" fn execlp_args(registers: *const usize, stack: *const usize) -> c_int {
    gather(Args::new(registers, stack), false, to_execvp)
}

unsafe extern "C" fn execle_args(registers: *const usize, stack: *const usize) -> c_int {
    gather(Args::new(registers, stack), true, to_execve)
}

/// A variadic entry point: saves rdi..r9 below the frame pointer, then calls `$args`
/// with their address and that of the stack arguments (above the saved rbp and the
/// return address). The stack stays 16-byte aligned at the call.
macro_rules! variadic {
    ($name:ident, $args:ident) => {
        #[unsafe(naked)]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name() -> c_int {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "sub rsp, 48",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "mov rdi, rsp",
                "lea rsi, [rbp + 16]",
                "call {args}",
                "leave",
                "ret",
                args = sym $args,
            )
        }
    };
}

variadic!(execl, execl_args);
variadic!(execlp, execlp_args);
variadic!(execle, execle_args);
