//! The report's sections as HTML: header, verdict, a section per GPU (plot, read-out,
//! live set), ranks, what was held at the end, processes, what was summarised.

use super::super::escape::markup as esc;
use super::super::plot;
use super::Report;
use crate::snapshot::events::SNAPSHOT_INTERPOSER;
use crate::units::{self, bytes, count};
use crate::views::oom::OomView;
use crate::views::process_name;
use crate::views::report::{EndRow, ReportView};
use crate::views::summary::Summary;
use std::fmt::Write;

/// Processes listed in the processes table.
const PROCESS_ROWS: usize = 64;
/// Ranks listed in the per-rank table: every rank of a job of a few thousand GPUs.
const RANK_ROWS: usize = 4096;

/// Text from a view that marks code with backticks (`vramtrace oom`, a setting): escaped,
/// and each pair of backticks a `<code>` element instead of literal marks.
pub fn prose(s: &str) -> String {
    let escaped = esc(s);
    let parts: Vec<&str> = escaped.split('`').collect();
    if parts.len().is_multiple_of(2) {
        // An unpaired backtick: leave the text as it is.
        return escaped.into_owned();
    }
    let mut o = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i % 2 == 1 {
            let _ = write!(o, "<code>{p}</code>");
        } else {
            o.push_str(p);
        }
    }
    o
}

pub fn header(o: &mut String, r: &Report) {
    let s = r.summary;
    let _ = writeln!(
        o,
        "<header class=\"top\"><span class=\"brand\">vramtrace report</span><code class=\"cmd\" title=\"{0}\">{0}</code>\
         <span class=\"muted\">{1}, {2}, {3}, {4}</span></header>",
        esc(&r.view.command),
        if s.start_unix_ns == 0 {
            "start time not recorded".to_string()
        } else {
            format!("started {}", units::wall(s.start_unix_ns))
        },
        if r.view.timeless {
            "one moment (no times)".to_string()
        } else {
            format!("{} long", units::seconds(s.duration_ns))
        },
        count(s.processes.len() as u64, "process"),
        count(s.devices.len() as u64, "GPU"),
    );
}

pub fn verdict(o: &mut String, v: &ReportView, oom: &OomView) {
    let class = if !oom.failures.is_empty() {
        "bad"
    } else if v.at_end.leaked_bytes > 0 {
        "warn"
    } else {
        "good"
    };
    let _ = write!(o, "<section id=\"vt-verdict\" class=\"verdict {class}\">");
    for (i, sentence) in v.verdict.iter().enumerate() {
        let tag = if i == 0 { "headline" } else { "sub" };
        let _ = write!(o, "<p class=\"{tag}\">{}</p>", esc(sentence));
    }
    let _ = writeln!(o, "</section>");
}

pub fn devices(o: &mut String, r: &Report, plots: usize, notes: &mut Vec<String>) {
    for (i, p) in r.view.plots.iter().enumerate().take(plots) {
        let d = r
            .summary
            .devices
            .iter()
            .find(|d| d.host == p.host && d.gpu == p.gpu);
        let _ = write!(
            o,
            "<section class=\"device\" id=\"vt-dev-{i}\"><h2>{}</h2><p class=\"stats\">",
            esc(&crate::views::plot::heading(p))
        );
        let _ = write!(
            o,
            "<span>peak <b>{}</b> at {}</span>",
            bytes(p.peak_bytes),
            r.view.when(p.peak_time_ns)
        );
        if let Some(d) = d {
            if let Some(t) = d.peak_requested_bytes {
                let _ = write!(o, "<span>tensors at most <b>{}</b></span>", bytes(t));
            }
            let _ = write!(
                o,
                "<span>{}</span>",
                esc(&who_ran(r.summary, &d.host, &d.pids))
            );
        }
        if let Some(c) = p.capacity_bytes {
            let _ = write!(o, "<span>capacity {}</span>", bytes(c));
        }
        if !p.failures.is_empty() {
            let _ = write!(
                o,
                "<span class=\"bad\">{}</span>",
                count(p.failures.len() as u64, "failed allocation")
            );
        }
        let _ = write!(
            o,
            "<button type=\"button\" class=\"vt-zoomout\" id=\"vt-zoomout-{i}\" hidden>Zoom out</button><span class=\"vt-zoomnote\" id=\"vt-zoomnote-{i}\" hidden></span></p>"
        );
        o.push_str(&plot::svg(p, &format!("vt-plot-{i}"), false));
        let zoom = if r.view.timeless {
            ""
        } else {
            "; drag across it to zoom in"
        };
        let _ = writeln!(
            o,
            "<p class=\"readout\" id=\"vt-readout-{i}\">Hover the plot for each layer's bytes; click it for what was live then{zoom}.</p>\
             <div class=\"liveset\" id=\"vt-live-{i}\"></div></section>"
        );
        if p.points_merged {
            notes.push(format!(
                "{}: the plot merges neighbouring buckets to {} points per line, each keeping its most",
                p.title,
                crate::views::plot::MAX_POINTS
            ));
        }
        if p.marks_left_out > 0 {
            notes.push(format!(
                "{}: {} left off the plot",
                p.title,
                count(p.marks_left_out, "marker")
            ));
        }
    }
    let rest = r.view.plots.get(plots..).unwrap_or_default();
    if !rest.is_empty() {
        other_gpus(o, rest);
        notes.push(format!(
            "GPUs: {} drawn, {} more in a table of peaks",
            plots,
            rest.len()
        ));
    }
}

/// GPUs past the plotted ones, a row each.
fn other_gpus(o: &mut String, rest: &[crate::views::plot::DevicePlot]) {
    let _ = writeln!(
        o,
        "<section id=\"vt-other-gpus\"><h2>Other GPUs</h2><table><thead><tr><th>GPU</th><th class=\"n\">peak reserved</th><th class=\"n\">at</th><th class=\"n\">failed allocations</th></tr></thead><tbody>"
    );
    for p in rest {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&crate::views::plot::heading(p)),
            bytes(p.peak_bytes),
            units::seconds(p.peak_time_ns),
            p.failures.len()
        );
    }
    let _ = writeln!(o, "</tbody></table></section>");
}

/// `pid 12`, `pids 12, 13 (ranks 0, 1)`, or a snapshot's file name.
fn who_ran(s: &Summary, host: &str, pids: &[u32]) -> String {
    // By host too: the same pid on two hosts is two processes.
    let ranks = crate::views::ranks::of_pids(s, host, pids);
    let names: Vec<String> = pids
        .iter()
        .take(8)
        .map(|pid| process_name::of(s, host, *pid))
        .collect();
    let more = if pids.len() > 8 { ", ..." } else { "" };
    let mut out = if names.iter().all(|n| n.starts_with("pid ")) {
        let shown: Vec<String> = pids.iter().take(8).map(u32::to_string).collect();
        let noun = if pids.len() == 1 { "pid" } else { "pids" };
        format!("{noun} {}{more}", shown.join(", "))
    } else {
        format!("{}{more}", names.join(", "))
    };
    if !ranks.is_empty() {
        let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
        let shown: Vec<&str> = ranks.iter().take(8).map(String::as_str).collect();
        let _ = write!(out, " ({noun} {})", shown.join(", "));
    }
    out
}

pub fn ranks(o: &mut String, s: &Summary, v: &ReportView, notes: &mut Vec<String>) {
    if s.ranks.len() < 2 {
        return;
    }
    let _ = writeln!(o, "<section id=\"vt-ranks\"><h2>Ranks</h2>");
    if let Some(spread) = &s.rank_spread {
        super::rank_spread::html(o, spread, &s.ranks, s.start_unix_ns);
    }
    let _ = writeln!(
        o,
        "<table><thead><tr><th>rank</th><th>process</th><th>host</th><th>GPUs</th><th class=\"n\">peak reserved</th><th class=\"n\">peak tensors</th><th class=\"n\">failed allocations</th><th></th></tr></thead><tbody>"
    );
    for (k, r) in s.ranks.iter().enumerate().take(RANK_ROWS) {
        let class = if r.failed_allocations > 0 {
            " class=\"bad\""
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&r.rank),
            esc(&process_name::of(s, &r.host, r.pid)),
            esc(&r.host),
            esc(v.rank_gpus.get(k).map_or("", String::as_str)),
            bytes(r.peak_reserved_bytes),
            r.peak_requested_bytes.map(bytes).unwrap_or_else(|| "-".into()),
            r.failed_allocations,
            if r.highest { "highest peak" } else { "" }
        );
    }
    let _ = writeln!(o, "</tbody></table></section>");
    if s.ranks.len() > RANK_ROWS {
        notes.push(format!(
            "ranks: the first {RANK_ROWS} of {} are listed (`vramtrace summary` lists all)",
            s.ranks.len()
        ));
    }
}

pub fn at_end(o: &mut String, v: &ReportView, rows: usize, notes: &mut Vec<String>) {
    let e = &v.at_end;
    let _ = writeln!(o, "<section id=\"vt-end\"><h2>Held at the end</h2>");
    if e.leaked.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"good\">No leaks: every process that exited normally freed what it allocated{}.</p>",
            if e.cached_bytes > 0 {
                format!(
                    " (its caching allocator still held {} of cache, which is not a leak)",
                    bytes(e.cached_bytes)
                )
            } else {
                String::new()
            }
        );
    } else {
        let _ = writeln!(
            o,
            "<h3>Leaks: {} never freed by processes that exited normally</h3>",
            bytes(e.leaked_bytes)
        );
        end_table(o, &e.leaked, rows, notes, "leak");
    }
    if !e.live_at_death.is_empty() {
        let _ = writeln!(
            o,
            "<h3>Live when the program died: {}</h3><p class=\"muted\">Not leaks: what a killed process, one ended by its failed allocation, or a snapshot still held at that moment.</p>",
            bytes(e.live_at_death_bytes)
        );
        end_table(o, &e.live_at_death, rows, notes, "held-at-death");
    }
    let _ = writeln!(o, "</section>");
}

fn end_table(o: &mut String, rows: &[EndRow], limit: usize, notes: &mut Vec<String>, what: &str) {
    let _ = writeln!(
        o,
        "<table><thead><tr><th class=\"n\">bytes</th><th class=\"n\">count</th><th>process</th><th>device</th><th>how it ended</th><th>allocated</th><th>who</th></tr></thead><tbody>"
    );
    for r in rows.iter().take(limit) {
        let _ = writeln!(
            o,
            "<tr><td class=\"n\" title=\"{} bytes\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"who\">{}</td></tr>",
            r.bytes,
            bytes(r.bytes),
            count(r.count, if r.unit == "tensors" { "tensor" } else { "block" }),
            esc(&r.process),
            r.device,
            r.ending,
            esc(&format!(
                "{}-{}",
                units::seconds(r.first_time_ns),
                units::seconds(r.last_time_ns)
            )),
            esc(&r.who)
        );
    }
    let _ = writeln!(o, "</tbody></table>");
    if rows.len() > limit {
        notes.push(format!(
            "{what} table: the {limit} largest of {} (`vramtrace leaks` lists all)",
            count(rows.len() as u64, "group")
        ));
    }
}

pub fn processes(o: &mut String, s: &Summary, notes: &mut Vec<String>) {
    let _ = writeln!(
        o,
        "<section id=\"vt-processes\"><h2>Processes</h2><table><thead><tr><th>process</th><th>rank</th><th>host</th><th>command</th><th>trace</th><th>started</th></tr></thead><tbody>"
    );
    for p in s.processes.iter().take(PROCESS_ROWS) {
        let state = match (&p.error, p.complete) {
            (Some(e), _) => format!("read error: {e}"),
            (None, true) if p.interposer == SNAPSHOT_INTERPOSER => "PyTorch snapshot".into(),
            (None, true) => "complete".into(),
            (None, false) => "cut (process killed)".into(),
        };
        let command = p.command();
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            esc(&process_name::of_process(p)),
            esc(p.rank.as_deref().unwrap_or("-")),
            esc(&p.host),
            esc(&command),
            esc(&state),
            units::wall(p.start_unix_ns)
        );
    }
    let _ = writeln!(o, "</tbody></table></section>");
    if s.processes.len() > PROCESS_ROWS {
        notes.push(format!(
            "processes: the first {PROCESS_ROWS} of {} are listed",
            s.processes.len()
        ));
    }
}

pub fn summarised(o: &mut String, s: &Summary, notes: &[String]) {
    let _ = writeln!(o, "<footer id=\"vt-summarised\">");
    for u in &s.unreadable {
        let _ = writeln!(o, "<p class=\"bad\">Unreadable: {}</p>", esc(u));
    }
    if !notes.is_empty() {
        let _ = writeln!(o, "<p><b>Summarised:</b></p><ul>");
        for n in notes {
            let _ = writeln!(o, "<li>{}</li>", prose(n));
        }
        let _ = writeln!(o, "</ul>");
    }
    let _ = writeln!(
        o,
        "<p class=\"muted\">Times are seconds since the run's start; sizes in binary units (exact bytes in the tooltips and in <code>vramtrace summary --json</code>).</p></footer>"
    );
}
