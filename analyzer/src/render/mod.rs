//! Renderers: they only format views (and, for the exports, the replay's steps as they
//! stream by). Text for the terminal, JSON, CSV, SVG, one-file HTML, Chrome trace JSON.

pub mod check;
pub mod csv;
pub mod diff;
pub mod escape;
mod event_kind;
pub mod flamegraph;
pub mod leaks;
pub mod oom;
pub mod parquet;
pub mod peak;
pub mod perfetto;
pub mod plot;
mod plot_areas;
mod rank_spread;
pub mod report;
pub mod style;
pub mod summary;
mod summary_verdict;
pub mod svg;

use serde::Serialize;

/// A view as pretty JSON with a trailing newline.
pub fn json<T: Serialize>(view: &T) -> String {
    let mut s =
        serde_json::to_string_pretty(view).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    escape::json(&s).into_owned()
}
