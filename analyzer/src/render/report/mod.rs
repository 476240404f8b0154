//! `report`: one self-contained HTML page (inline CSS, SVG and script; nothing fetched).
//! The first screen says what happened (the verdict, one sentence each with its figures)
//! and shows each GPU's plot; then what was live at a clicked moment, the ranks, each
//! failure and each peak as an interactive flamegraph, and what was still held at the
//! end. Every string from a trace goes through [`super::escape`] for its context.
//!
//! The page's script (report.js) reads the compact data embedded as JSON ([`data`]) for
//! the hover read-out and the live set at a moment; with `#selftest` in the address it
//! checks the page itself and writes what it found into `#vt-selftest`, for a headless
//! browser to read back (analyzer/tests/report_browser.rs).

mod baseline;
mod data;
mod flamegraphs;
mod rank_spread;
mod sections;

use super::escape::{self, markup as esc};
use crate::views::leaks::Leaks;
use crate::views::oom::OomView;
use crate::views::report::ReportView;
use crate::views::summary::Summary;
use std::fmt::Write;

/// The page never grows past this: a larger one is rendered again with less (fewer
/// moments, then no flamegraphs), saying so.
pub const MAX_PAGE_BYTES: usize = 5 << 20;

const STYLE: &str = include_str!("report.css");
const SCRIPT: &str = include_str!("report.js");
/// Zooming a plot's time axis (report.js calls it), in the same script element.
const ZOOM: &str = include_str!("zoom.js");

pub struct Report<'a> {
    pub view: &'a ReportView,
    pub summary: &'a Summary,
    pub oom: &'a OomView,
    pub leaks: &'a Leaks,
    /// `--baseline`: the run compared with, drawn on the plots.
    pub baseline: Option<&'a crate::views::baseline::Baseline>,
}

/// How much of the run a page carries.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Moments whose live set is embedded (each device's peak and failures apart).
    pub moments: usize,
    /// Flamegraphs drawn (failures first, then peaks).
    pub flamegraphs: usize,
    /// Rows per table.
    pub rows: usize,
    /// GPUs drawn with a plot and a live set (the rest in a table of peaks).
    pub plots: usize,
}

/// Budgets tried in turn until the page fits [`MAX_PAGE_BYTES`].
pub const BUDGETS: [Budget; 4] = [
    Budget {
        moments: usize::MAX,
        flamegraphs: 16,
        rows: 20,
        plots: crate::views::report::MOST_PLOTS,
    },
    Budget {
        moments: 50,
        flamegraphs: 4,
        rows: 20,
        plots: 12,
    },
    Budget {
        moments: 10,
        flamegraphs: 1,
        rows: 10,
        plots: 6,
    },
    Budget {
        moments: 0,
        flamegraphs: 0,
        rows: 5,
        plots: 3,
    },
];

/// The page, in the first budget it fits (the last one's page otherwise: its plots and
/// tables are bounded by the number of GPUs and processes, and both are capped).
pub fn page(r: &Report) -> String {
    let mut last = String::new();
    for (i, budget) in BUDGETS.iter().enumerate() {
        last = render(r, *budget, i > 0);
        if last.len() <= MAX_PAGE_BYTES {
            break;
        }
    }
    last
}

fn render(r: &Report, budget: Budget, cut: bool) -> String {
    let s = r.summary;
    let v = r.view;
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>vramtrace: {}</title><style>{STYLE}</style></head><body>\n<main>\n",
        esc(&v.command)
    );
    let mut notes = Vec::new();
    sections::header(&mut o, r);
    sections::verdict(&mut o, v, r.oom);
    baseline::section(&mut o, r, &mut notes);
    sections::devices(&mut o, r, budget.plots, &mut notes);
    sections::ranks(&mut o, s, v, &mut notes);
    flamegraphs::failures(&mut o, r, budget, &mut notes);
    flamegraphs::peaks(&mut o, r, budget, &mut notes);
    sections::at_end(&mut o, v, budget.rows, &mut notes);
    sections::processes(&mut o, s, &mut notes);
    let embedded = data::json(r, budget, &mut notes);
    if cut {
        notes.push(format!(
            "the page was over {} with everything, so it keeps less (moments, flamegraphs, rows, plots)",
            crate::units::bytes(MAX_PAGE_BYTES as u64)
        ));
    }
    sections::summarised(&mut o, s, &notes);
    // No `</script>`, `<!--` or `<script` inside: the element ends where it should.
    let embedded = escape::script_json(&embedded).into_owned();
    let _ = write!(
        o,
        "</main>\n<script type=\"application/json\" id=\"vt-data\">{embedded}</script>\n<script>{ZOOM}\n{SCRIPT}</script>\n</body></html>\n"
    );
    o
}
