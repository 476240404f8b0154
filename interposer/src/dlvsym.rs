//! The `dlvsym` override, for a layer preloaded before vramtrace.
//!
//! GPU-sharing layers such as HAMi-core's libvgpu.so override `dlsym` and find "the real
//! one" with `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")`. glibc's `dlvsym` never matches an
//! unversioned definition, so it skips vramtrace's `dlsym` and hands the layer glibc's:
//! every CUDA function the layer then looks up would bypass vramtrace. The next `dlsym`
//! after such a caller is vramtrace's, so that is the answer it gets here; every other
//! request goes on to glibc's `dlvsym` by a tail jump (`RTLD_NEXT` depends on the
//! caller's return address, which stays on the stack).

#![allow(clippy::missing_safety_doc)]

use crate::{elf_symbols, symbols};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `dlvsym`, found once in libc's symbol table.
static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's `dlvsym`, or 0 when libc's symbol table cannot be read.
pub fn real() -> usize {
    let p = REAL_DLVSYM.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    let p = find_in_libc(b"dlvsym");
    REAL_DLVSYM.store(p, Ordering::Release);
    p
}

/// What the trampoline does: return `value`, or jump to `forward` when it is not 0.
#[repr(C)]
pub struct Answer {
    value: usize,
    forward: usize,
}

#[cfg(all(target_arch = "x86_64", not(test)))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "push rdx",
        // The caller's return address, above the three saved arguments.
        "mov rcx, qword ptr [rsp + 24]",
        "call {answer}",
        "mov r11, rdx",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test r11, r11",
        "jz 2f",
        "jmp r11",
        "2:",
        "ret",
        answer = sym answer,
    )
}

/// Decides a `dlvsym` call made from `caller` (its return address).
#[cfg_attr(test, allow(dead_code))]
extern "C" fn answer(
    handle: *mut c_void,
    name: *const c_char,
    _version: *const c_char,
    caller: usize,
) -> Answer {
    let ours = std::panic::catch_unwind(|| {
        // SAFETY: dlvsym's contract: name is a C string.
        let asks_dlsym = !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() == b"dlsym";
        (asks_dlsym && handle == libc::RTLD_NEXT && comes_after(caller))
            .then(crate::dlsym::exported_dlsym)
    })
    .ok()
    .flatten()
    .filter(|&p| p != 0);
    match ours {
        Some(value) => Answer { value, forward: 0 },
        None => Answer {
            value: 0,
            forward: real(),
        },
    }
}

/// Whether vramtrace comes after the object holding `caller` in the loader's list (the
/// order `RTLD_NEXT` searches in): its `dlsym` is then the next one the caller sees.
fn comes_after(caller: usize) -> bool {
    let Some(at) = symbols::locate(caller) else {
        return false;
    };
    if at.is_ours() {
        return false;
    }
    let ours = symbols::locate(comes_after as *const () as usize).map(|l| l.base);
    let mut order = Order {
        caller: at.base,
        ours: ours.unwrap_or(0),
        seen_caller: false,
        after: false,
    };
    // SAFETY: the callback only reads what the loader passes it.
    unsafe { libc::dl_iterate_phdr(Some(in_order), (&mut order as *mut Order).cast()) };
    order.after
}

struct Order {
    caller: usize,
    ours: usize,
    seen_caller: bool,
    after: bool,
}

unsafe extern "C" fn in_order(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    let order = &mut *data.cast::<Order>();
    let base = elf_symbols::load_start(&*info);
    if base == order.caller {
        order.seen_caller = true;
    }
    if base == order.ours {
        order.after = order.seen_caller;
        return 1;
    }
    0
}

/// `name` in glibc's own symbol tables: libc.so.6 (glibc >= 2.34) or libdl.so.2 (before),
/// 0 if neither defines it. vramtrace cannot ask `dlvsym` for glibc's `dlvsym`: its own
/// calls would reach this override.
pub fn find_in_libc(name: &[u8]) -> usize {
    let glibc = |info: &libc::dl_phdr_info| {
        let file = elf_symbols::file_name(info);
        file.starts_with(b"libc.so.") || file.starts_with(b"libdl.so.")
    };
    elf_symbols::find(&glibc, name).unwrap_or(0)
}
