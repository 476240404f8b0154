//! The vramtrace trace format, version 1 (see `docs/trace-format.md`).
//!
//! A trace is JSON Lines: one [`Header`] line, then [`Event`] lines and, when the
//! process ended normally, an [`End`] line. This crate is the one definition of those
//! records: the interposer writes them with [`Event::write_json`] (no allocation, so it
//! can run in a signal handler) and the analyzer reads them with [`reader::TraceReader`].

pub mod api;
pub mod event;
mod fast;
pub mod header;
pub mod location;
pub mod lost;
pub mod name;
pub mod reader;
pub mod redact;
pub mod stacks;
mod write;

pub use api::{Api, Kind, Op};
pub use event::{End, Event};
pub use header::{Header, Settings, ENV_KEYS, FORMAT_NAME, FORMAT_VERSION};
pub use location::Location;
pub use lost::Lost;
pub use name::Name;
pub use stacks::{Call, Frame, Inlined, Node, StackTable};
pub use write::{JsonBuf, JsonOut};
