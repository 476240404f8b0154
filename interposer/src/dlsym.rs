//! The `dlsym` override: every path to a CUDA function crosses it (the runtime's one
//! `dlsym` of `cuGetProcAddress_v2`, cudarc's and PyTorch's `dlsym` of driver names).

// Each exported function's safety contract is that of the C function it stands in for.
#![allow(clippy::missing_safety_doc)]

use crate::symbols;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The next `dlsym` in the chain, found once: another interposer's preloaded after this
/// one (a GPU-sharing layer such as HAMi-core's libvgpu.so), else glibc's. Every lookup
/// the program makes goes on to it, so a layer behind vramtrace still sees, and can
/// limit, everything. Not exported: the jump reads it PC-relative.
static VRAMTRACE_REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's own `dlsym`, for vramtrace's own `RTLD_NEXT` lookups: "the definition after
/// this library" must come from the loader itself, not from a layer that would answer
/// relative to its own position.
static GLIBC_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds glibc's `dlsym` without calling `dlsym`: glibc 2.34 moved it into libc.so.6 and
/// dropped `_dl_sym`/`__libc_dlsym`, so ask `dlvsym` for each version it has carried
/// (this reaches vramtrace's `dlvsym`, which forwards a request from here to glibc's).
fn resolve_glibc_dlsym() -> usize {
    let p = GLIBC_DLSYM.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    let versions: &[&CStr] = &[c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17", c"GLIBC_2.0"];
    for v in versions {
        // SAFETY: valid C strings; dlvsym is not overridden.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) } as usize;
        if p != 0 {
            GLIBC_DLSYM.store(p, Ordering::Release);
            return p;
        }
    }
    // Without glibc's dlvsym (the override forwards to it), its own symbol table.
    let p = crate::dlvsym::find_in_libc(b"dlsym");
    if p != 0 {
        GLIBC_DLSYM.store(p, Ordering::Release);
        return p;
    }
    unavailable as *const () as usize
}

/// Finds the next `dlsym` after this library: glibc's `dlsym(RTLD_NEXT, "dlsym")` from
/// here. `dlvsym` alone would skip an unversioned `dlsym` that another layer exports.
extern "C" fn resolve_real_dlsym() -> usize {
    let p = VRAMTRACE_REAL_DLSYM.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    let glibc = resolve_glibc_dlsym();
    // SAFETY: glibc's dlsym (or `unavailable`), called from this library's own code.
    let next =
        unsafe { std::mem::transmute::<usize, DlsymFn>(glibc)(libc::RTLD_NEXT, c"dlsym".as_ptr()) }
            as usize;
    let next = match symbols::locate(next) {
        Some(l) if !l.is_ours() => next,
        _ => glibc,
    };
    VRAMTRACE_REAL_DLSYM.store(next, Ordering::Release);
    next
}

/// Stands in when glibc's `dlsym` cannot be found at all: answers "no such symbol"
/// rather than jumping to address 0.
extern "C" fn unavailable(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// Calls glibc's `dlsym` from vramtrace's own code (so `RTLD_NEXT` means "after us").
///
/// # Safety
/// Same contract as `dlsym`.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let f: DlsymFn = std::mem::transmute::<usize, DlsymFn>(resolve_glibc_dlsym());
    f(handle, name)
}

/// Calls the next `dlsym` in the chain (see [`VRAMTRACE_REAL_DLSYM`]) for a lookup the
/// program made.
///
/// # Safety
/// Same contract as `dlsym`.
unsafe fn next_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let f: DlsymFn = std::mem::transmute::<usize, DlsymFn>(resolve_real_dlsym());
    f(handle, name)
}

/// `dlsym(RTLD_NEXT, ...)` resolves "next" relative to its caller's return address. A
/// forwarding call would make this library the caller: OpenMP's tool loader then found
/// itself and `import torch` spun forever. So RTLD_NEXT lookups leave by a tail jump,
/// with the original return address still on the stack.
/// `dlsym(RTLD_DEFAULT, ...)` depends on its caller too: a library `dlopen`ed with
/// `RTLD_LOCAL` finds its own symbols (and its dependencies') that the global scope lacks.
/// So default-scope lookups of names that are not CUDA entry points leave by the same
/// tail jump; only the names vramtrace may wrap go through [`dlsym_lookup`].
#[cfg(all(target_arch = "x86_64", not(test)))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 2f",
        "test rdi, rdi",
        "jnz {lookup}",
        // RTLD_DEFAULT: ask whether the name is one to wrap; 0 means it is.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdi, rsi",
        "call {plain}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz {lookup}",
        "jmp rax",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp rax",
        lookup = sym dlsym_lookup,
        plain = sym plain_default_lookup,
        real = sym VRAMTRACE_REAL_DLSYM,
        resolve = sym resolve_real_dlsym,
    )
}

#[cfg(all(target_arch = "aarch64", not(test)))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // Same idea as x86-64: RTLD_NEXT (-1) leaves by a branch with x30 (the caller's
    // return address) untouched.
    // RTLD_DEFAULT (0) of a name not to wrap leaves by a branch as well (see x86-64).
    core::arch::naked_asm!(
        "cmn x0, #1",
        "b.eq 2f",
        "cbz x0, 4f",
        "b {lookup}",
        "4:",
        "stp x0, x1, [sp, #-32]!",
        "str x30, [sp, #16]",
        "mov x0, x1",
        "bl {plain}",
        "mov x16, x0",
        "ldr x30, [sp, #16]",
        "ldp x0, x1, [sp], #32",
        "cbz x16, 5f",
        "br x16",
        "5:",
        "b {lookup}",
        "2:",
        "stp x0, x1, [sp, #-32]!",
        "str x30, [sp, #16]",
        "bl {resolve}",
        "mov x16, x0",
        "ldr x30, [sp, #16]",
        "ldp x0, x1, [sp], #32",
        "br x16",
        lookup = sym dlsym_lookup,
        plain = sym plain_default_lookup,
        resolve = sym resolve_real_dlsym,
    )
}

/// The address of vramtrace's own `dlsym`, for a layer preloaded before it that asks
/// `dlvsym` for the next one ([`crate::dlvsym`]); 0 where it is not found.
pub fn exported_dlsym() -> usize {
    static OURS: AtomicUsize = AtomicUsize::new(0);
    let p = OURS.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    let p = crate::elf_symbols::own(b"dlsym").unwrap_or(0);
    OURS.store(p, Ordering::Release);
    p
}

/// For `dlsym(RTLD_DEFAULT, name)`: the next `dlsym` when `name` is not one vramtrace may
/// wrap (the caller then gets its answer exactly, as if made by itself), else 0.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn plain_default_lookup(name: *const c_char) -> usize {
    if !name.is_null() {
        // SAFETY: dlsym's contract: name is a C string.
        let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
        if symbols::Slot::find(bytes).is_some() {
            return 0;
        }
    }
    resolve_real_dlsym()
}

/// A lookup in a specific handle or the default scope: the next `dlsym`'s answer,
/// replaced by a wrapper when it is exactly a CUDA memory or lookup function, or another
/// layer's function standing in for one (wrapped under the name asked for: the caller
/// calls it with that symbol's ABI).
#[cfg_attr(test, allow(dead_code))]
extern "C" fn dlsym_lookup(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: forwarding the caller's own arguments.
    let p = unsafe { next_dlsym(handle, name) };
    if name.is_null() {
        return p;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: dlsym's contract: name is a C string.
        let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
        let Some(slot) = symbols::Slot::find(bytes) else {
            return p;
        };
        let Some(mut at) = symbols::locate(p as usize) else {
            return p;
        };
        let mut real = p as usize;
        if at.is_ours() {
            // The default scope found our own export: the answer the program would get
            // without vramtrace is the next definition, or none.
            // SAFETY: RTLD_NEXT from our own code.
            real = unsafe { real_dlsym(libc::RTLD_NEXT, name) } as usize;
            if real == 0 {
                return std::ptr::null_mut();
            }
            match symbols::locate(real) {
                Some(next) if next.is_ours() => return std::ptr::null_mut(),
                Some(next) => at = next,
                None => return real as *mut c_void,
            }
        }
        symbols::wrap_at(slot, real, &at) as *mut c_void
    })
    .unwrap_or(p)
}
