//! Call stacks: raw return addresses taken on the hot path ([`capture`]), deduplicated
//! into a trie and symbolised on the writer thread ([`intern`], [`symbolize`]).
//!
//! Unwinding uses framehop over the `.eh_frame` data of every loaded module, read in
//! place from memory ([`modules`]), with a per-thread rule cache: no ELF file is opened
//! and nothing is allocated per call.

#[cfg(target_arch = "x86_64")]
pub mod capture;
/// Elsewhere no stack is taken yet (the unwinder is set up for x86-64 registers).
#[cfg(not(target_arch = "x86_64"))]
pub mod capture {
    pub fn capture(_out: &mut [u64]) -> usize {
        0
    }
}
pub mod intern;
pub mod modules;
pub mod python;
pub mod symbolize;

/// The most frames one stack holds (`VRAMTRACE_STACK_DEPTH` is capped to it).
pub const MAX_DEPTH: usize = 128;
