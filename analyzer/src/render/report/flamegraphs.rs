//! Each failure's post-mortem and each GPU's peak, with inferno's interactive flamegraph
//! (search, zoom, tooltips). Each graph lives in a sandboxed `<iframe srcdoc>`: inferno's
//! SVG brings a script with global names and element ids of its own, which several
//! graphs in one page would share and break; the sandbox also keeps its script (and
//! the frame names it draws) away from the page.

use super::super::escape::{document_attribute, markup as esc};
use super::super::flamegraph;
use super::sections::prose;
use super::{Budget, Report};
use crate::units::{self, bytes, count};
use crate::views::report::Held;
use std::fmt::Write;

/// Pixels a flamegraph is wide.
const GRAPH_WIDTH: usize = 1100;
/// Failures described in full (the flamegraph budget aside).
const FAILURES: usize = 20;

pub fn failures(o: &mut String, r: &Report, budget: Budget, notes: &mut Vec<String>) {
    let v = r.oom;
    if v.failures.is_empty() {
        return;
    }
    let many_hosts = r
        .summary
        .devices
        .iter()
        .any(|d| d.host != r.summary.devices[0].host);
    let _ = writeln!(o, "<section id=\"vt-failures\"><h2>Failed allocations</h2>");
    let mut graphs = 0;
    for (i, f) in v.failures.iter().take(FAILURES).enumerate() {
        let gpu = crate::replay::devices::gpu_label(&f.host, &f.gpu, many_hosts);
        let rank = f
            .rank
            .as_ref()
            .map(|r| format!(" (rank {r})"))
            .unwrap_or_default();
        let _ = write!(
            o,
            "<div class=\"fail\"><h3>{} of {} on {} at {}</h3><p>{}{} asked for it on its device {} and got <code>{}</code>, holding {} there.</p><p>{}</p><ul>",
            f.api,
            bytes(f.requested_bytes),
            esc(&gpu),
            r.view.when(f.time_ns),
            esc(&crate::views::process_name::of(r.summary, &f.host, f.pid)),
            esc(&rank),
            f.device,
            esc(&f.result_name),
            bytes(f.live_bytes),
            prose(&f.explanation)
        );
        for a in &f.advice {
            let _ = write!(o, "<li>{}</li>", prose(a));
        }
        let _ = writeln!(o, "</ul>");
        if let Some(held) = r
            .view
            .failures
            .get(i)
            .filter(|_| graphs < budget.flamegraphs)
        {
            graphs += 1;
            graph(o, r, held, &format!("vt-flame-failure-{i}"));
        }
        let _ = writeln!(o, "</div>");
    }
    if v.failures.len() > FAILURES {
        notes.push(format!(
            "failed allocations: the first {FAILURES} of {} are described (`vramtrace oom` lists all)",
            v.failures.len()
        ));
    }
    if graphs < r.view.failures.len() {
        notes.push(format!(
            "{} drawn as flamegraphs",
            count(graphs as u64, "failure")
        ));
    }
    let _ = writeln!(o, "</section>");
}

pub fn peaks(o: &mut String, r: &Report, budget: Budget, notes: &mut Vec<String>) {
    let already = r.view.failures.len().min(budget.flamegraphs);
    let room = budget.flamegraphs.saturating_sub(already);
    let _ = writeln!(o, "<section id=\"vt-peaks\"><h2>Who held the peak</h2>");
    for (i, held) in r.view.peaks.iter().enumerate().take(room) {
        let what = if held.layer == "allocated" {
            format!("tensors at their peak, {} requested", bytes(held.bytes))
        } else {
            format!("{} reserved at the peak", bytes(held.bytes))
        };
        let _ = write!(
            o,
            "<h3>{}: {what}, at {}</h3>",
            esc(&held.title),
            r.view.when(held.time_ns)
        );
        graph(o, r, held, &format!("vt-flame-peak-{i}"));
    }
    if room < r.view.peaks.len() {
        notes.push(format!(
            "peaks: {} of {} drawn as flamegraphs (`vramtrace flamegraph` draws each)",
            room,
            count(r.view.peaks.len() as u64, "GPU")
        ));
    }
    let _ = writeln!(o, "</section>");
}

fn graph(o: &mut String, r: &Report, held: &Held, id: &str) {
    let lines = flamegraph::folded_groups_named(
        &[(held.host.as_str(), held.gpu.as_str(), &held.groups)],
        |host, pid| crate::views::process_name::of(r.summary, host, pid),
    );
    let unit = if held.layer == "allocated" {
        "tensors"
    } else {
        "device memory"
    };
    let title = format!("{unit} live: {}", units::bytes(held.bytes));
    // Fixed, not fluid: inferno's fluid width reads the size of a standalone SVG
    // document, which a graph inside a page's frame does not have. 1100 fits the page's
    // column on a 1366-pixel screen; a narrower one scrolls the frame.
    let Ok(svg) = flamegraph::svg_of_width(&lines, &title, "nothing live", Some(GRAPH_WIDTH))
    else {
        let _ = write!(
            o,
            "<p class=\"muted\">(no flamegraph: inferno refused the stacks)</p>"
        );
        return;
    };
    let height = svg_height(&svg).unwrap_or(400) + 8;
    // Parsed as HTML, an inline <svg> gets no load event: its `onload="init(evt)"`
    // would never run, leaving the graph without zoom or search. The document calls it
    // itself once loaded.
    let svg = svg.replacen(" onload=\"init(evt)\"", "", 1);
    let doc = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>html,body{{margin:0}}svg{{display:block}}</style></head><body>{svg}\
         <script>window.addEventListener('load',function(){{if(typeof init==='function')init({{}});}});</script></body></html>"
    );
    let _ = writeln!(
        o,
        "<iframe class=\"vt-flame\" id=\"{}\" title=\"flamegraph: {}\" sandbox=\"allow-scripts\" style=\"height:{height}px\" srcdoc=\"{}\"></iframe>\
         <p class=\"muted small\">Width is bytes; click a frame to zoom, Ctrl-F or the Search button to find a function.</p>",
        esc(id),
        esc(&title),
        document_attribute(&doc)
    );
}

/// The `height` of the root `<svg>` inferno wrote.
fn svg_height(svg: &str) -> Option<u32> {
    let root = &svg[svg.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    let rest = &root[at..];
    rest[..rest.find('"')?].parse().ok()
}
