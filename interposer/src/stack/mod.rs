//! Call stacks: raw return addresses taken on the hot path ([`capture`]), deduplicated
//! into a trie and symbolised on the writer thread ([`intern`], [`symbolize`]).
//!
//! Unwinding uses framehop over the `.eh_frame` data of every loaded module, read in
//! place from memory ([`modules`]), with a per-thread rule cache and the thread's last walk
//! ([`walk`]): no ELF file is opened per call, and frames that match the last walk are
//! checked, not unwound again.

#[cfg(target_arch = "x86_64")]
pub mod capture;
/// Elsewhere no stack is taken yet (the unwinder is set up for x86-64 registers).
#[cfg(not(target_arch = "x86_64"))]
pub mod capture {
    pub fn capture(_out: &mut [u64], _at: super::Registers) -> (usize, u64) {
        (0, 0)
    }

    pub fn forget_modules() {}

    pub fn table_builds() -> u64 {
        0
    }

    pub struct ForkHold;

    pub fn hold_for_fork() -> ForkHold {
        ForkHold
    }
}
pub mod intern;
pub mod modules;
mod own_memory;
pub mod python;
mod python_layout;
mod python_nogil;
pub mod symbolize;
#[cfg(target_arch = "x86_64")]
mod walk;

/// Where a walk starts: the registers of a hook, taken in its own body by [`here!`], so that
/// the walk begins at the hook's frame and never unwinds vramtrace's inner functions. Valid
/// while that hook runs: its frame, which the walk reads, is unchanged until it returns.
#[derive(Clone, Copy, Default)]
pub struct Registers {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// The [`Registers`] of the function this expands in (inline assembly, so never a frame
/// of its own).
#[cfg(target_arch = "x86_64")]
macro_rules! here {
    () => {{
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers, touches nothing.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags),
            );
        }
        $crate::stack::Registers { ip, sp, bp }
    }};
}
#[cfg(not(target_arch = "x86_64"))]
macro_rules! here {
    () => {
        $crate::stack::Registers::default()
    };
}
pub(crate) use here;

/// The most frames one stack holds (`VRAMTRACE_STACK_DEPTH` is capped to it).
pub const MAX_DEPTH: usize = 128;
