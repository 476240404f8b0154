//! Call stacks: raw return addresses taken on the hot path ([`capture`]), deduplicated
//! into a trie and symbolised on the writer thread ([`intern`], [`symbolize`]).
//!
//! Unwinding uses framehop over the `.eh_frame` data of every loaded module, read in
//! place from memory ([`modules`]), with a per-thread rule cache: no ELF file is opened
//! and nothing is allocated per call.

pub mod capture;
pub mod intern;
pub mod modules;
pub mod python;
pub mod symbolize;

/// The most frames one stack holds (`VRAMTRACE_STACK_DEPTH` is capped to it).
pub const MAX_DEPTH: usize = 128;
