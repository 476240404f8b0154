//! `report`: one self-contained HTML file (inline CSS, SVG and script; nothing fetched).
//! A long run is summarised: the plots are the bucketed timeline, tables keep the
//! largest rows. The script renders the exact figures from the embedded JSON and leaves
//! `#vt-rendered` (or `#vt-error`) in the page, so a headless browser can check it.

use super::escape::{self, markup as esc};
use super::svg;
use crate::units::{self, bytes};
use crate::views::leaks::Leaks;
use crate::views::oom::OomView;
use crate::views::summary::Summary;
use crate::views::timeline::Timeline;
use serde_json::json;
use std::fmt::Write;

/// Rows kept per table.
const ROWS: usize = 20;
/// Failures described in full.
const FAILURES: usize = 20;

pub struct Report<'a> {
    pub summary: &'a Summary,
    pub timeline: &'a Timeline,
    pub oom: &'a OomView,
    pub leaks: &'a Leaks,
    /// The flamegraph (SVG) of what was live at the peak.
    pub flamegraph: Option<&'a str>,
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:960px}\
table{border-collapse:collapse;margin:.5em 0}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}h2{margin-top:1.6em}.muted{color:#777}\
.fail{border-left:4px solid #d62728;padding-left:8px;margin:1em 0}code{background:#f4f4f4;padding:0 3px}";

const SCRIPT: &str = r#"(function(){
function mark(id,text){var d=document.createElement('div');d.id=id;d.textContent=text;d.style.display='none';document.body.appendChild(d);}
window.addEventListener('error',function(e){mark('vt-error',String(e.message));});
try{
 var data=JSON.parse(document.getElementById('vt-data').textContent);
 function bin(n){var u=['B','KiB','MiB','GiB','TiB'],i=0,v=n;while(v>=1024&&i<u.length-1){v/=1024;i++;}return (i?v.toFixed(1):String(v))+' '+u[i];}
 data.devices.forEach(function(d,i){
  var el=document.getElementById('vt-peak-'+i);
  if(el){el.textContent=d.peak_reserved_bytes+' bytes ('+bin(d.peak_reserved_bytes)+')';}
 });
 document.querySelectorAll('td[data-bytes]').forEach(function(td){td.title=td.getAttribute('data-bytes')+' bytes';});
 mark('vt-rendered','ok');
}catch(e){mark('vt-error',String(e));}
})();"#;

pub fn render(r: &Report) -> String {
    let s = r.summary;
    let mut o = String::new();
    let title = s
        .processes
        .first()
        .map(|p| p.argv.join(" "))
        .unwrap_or_else(|| "vramtrace report".into());
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vramtrace: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&title)
    );
    let _ = writeln!(o, "<h1>vramtrace report</h1>");
    let _ = writeln!(
        o,
        "<p>Run started {}, {} long, {} process(es). Times are seconds since the run's start.</p>",
        units::wall(s.start_unix_ns),
        units::seconds(s.duration_ns),
        s.processes.len()
    );
    header(&mut o, s);
    devices(&mut o, r);
    if let Some(svg) = r.flamegraph {
        flamegraph(&mut o, svg);
    }
    failures(&mut o, r.oom);
    leaks(&mut o, r.leaks);
    for u in &s.unreadable {
        let _ = writeln!(o, "<p class=\"fail\">Unreadable: {}</p>", esc(u));
    }
    let data = json!({
        "devices": s.devices.iter().map(|d| json!({
            "host": d.host, "gpu": d.gpu, "peak_reserved_bytes": d.peak_reserved_bytes
        })).collect::<Vec<_>>(),
    });
    // No `</script>`, `<!--` or `<script` inside: the element ends where it should.
    let data = escape::script_json(&data.to_string()).into_owned();
    let _ = write!(
        o,
        "<script type=\"application/json\" id=\"vt-data\">{data}</script>\n<script>{SCRIPT}</script>\n</body></html>\n"
    );
    o
}

fn header(o: &mut String, s: &Summary) {
    let _ = writeln!(o, "<h2>Processes</h2><table><tr><th>pid</th><th>rank</th><th>host</th><th>command</th><th>settings</th><th>started</th><th>trace</th></tr>");
    for p in s.processes.iter().take(ROWS * 5) {
        let state = match (&p.error, p.complete) {
            (Some(e), _) => format!("read error: {}", esc(e)),
            (None, true) => "complete".into(),
            (None, false) => "cut (process killed)".into(),
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td class=\"muted\">{}</td><td>{}</td><td>{state}</td></tr>",
            p.pid,
            esc(p.rank.as_deref().unwrap_or("-")),
            esc(&p.host),
            esc(&p.argv.join(" ")),
            esc(&settings(p)),
            units::wall(p.start_unix_ns)
        );
    }
    let _ = writeln!(o, "</table>");
    if s.processes.len() > ROWS * 5 {
        let _ = writeln!(
            o,
            "<p class=\"muted\">... and {} more processes</p>",
            s.processes.len() - ROWS * 5
        );
    }
}

fn settings(p: &crate::views::summary::ProcessSummary) -> String {
    let mut parts = vec![
        format!("output {}", p.settings.output),
        format!(
            "children {}",
            if p.settings.children { "on" } else { "off" }
        ),
        format!("flush {} ms", p.settings.flush_ms),
        format!("interposer {}", p.interposer),
    ];
    parts.extend(p.env.iter().map(|(k, v)| format!("{k}={v}")));
    parts.join("; ")
}

fn devices(o: &mut String, r: &Report) {
    let plots = svg::plots(r.timeline);
    let many_hosts = r
        .summary
        .devices
        .iter()
        .any(|d| d.host != r.summary.devices[0].host);
    for (i, d) in r.summary.devices.iter().enumerate() {
        let title = crate::run::devices::gpu_label(&d.host, &d.gpu, many_hosts);
        let _ = writeln!(o, "<h2>{}</h2>", esc(&title));
        let _ = writeln!(
            o,
            "<p>Peak <b>{}</b> <span id=\"vt-peak-{i}\" class=\"muted\"></span> at {}; {} at the end.</p>",
            bytes(d.peak_reserved_bytes),
            units::when(r.summary.start_unix_ns, d.peak_time_ns),
            bytes(d.reserved_bytes_at_end)
        );
        if let Some((_, plot)) = plots.iter().find(|(t, _)| *t == title) {
            let _ = writeln!(
                o,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"860\" height=\"280\" font-family=\"sans-serif\" font-size=\"11\">{plot}</svg>"
            );
        }
        let _ = writeln!(o, "<h3>At the peak</h3><table><tr><th>bytes</th><th>blocks</th><th>pid</th><th>device</th><th>api</th></tr>");
        group_rows(o, &d.at_peak);
        let _ = writeln!(o, "</table>");
        if d.at_peak.len() > ROWS {
            let _ = writeln!(
                o,
                "<p class=\"muted\">... {} more groups</p>",
                d.at_peak.len() - ROWS
            );
        }
        tensors(o, d);
    }
}

/// The allocated layer's peak: the tensors then, by who asked for them.
fn tensors(o: &mut String, d: &crate::views::summary::RunDeviceSummary) {
    let Some(peak) = d.peak_requested_bytes else {
        return;
    };
    let _ = writeln!(
        o,
        "<h3>Tensors at their peak: {} requested</h3><table><tr><th>bytes</th><th>tensors</th><th>pid</th><th>device</th><th>who asked</th></tr>",
        bytes(peak)
    );
    group_rows(o, &d.tensors_at_peak);
    let _ = writeln!(o, "</table>");
}

/// A table row per group (the first [`ROWS`]): bytes, blocks, pid, device, who.
fn group_rows(o: &mut String, groups: &[crate::views::groups::Group]) {
    for g in groups.iter().take(ROWS) {
        let _ = writeln!(
            o,
            "<tr><td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            g.bytes,
            bytes(g.bytes),
            g.blocks,
            g.pid.unwrap_or(0),
            g.device.unwrap_or(0),
            esc(&g.who())
        );
    }
}

fn failures(o: &mut String, v: &OomView) {
    let _ = writeln!(o, "<h2>Failed allocations</h2>");
    if v.failures.is_empty() {
        let _ = writeln!(o, "<p>None.</p>");
    }
    for f in v.failures.iter().take(FAILURES) {
        let _ = writeln!(
            o,
            "<div class=\"fail\"><p>At {}, pid {} asked <code>{}</code> for <b>{}</b> on device {} and got {}. It held {} there.</p><p>{}</p><ul>",
            units::when(v.start_unix_ns, f.time_ns),
            f.pid,
            f.api,
            bytes(f.requested_bytes),
            f.device,
            esc(&f.result_name),
            bytes(f.live_bytes),
            esc(&f.explanation)
        );
        for a in &f.advice {
            let _ = writeln!(o, "<li>{}</li>", esc(a));
        }
        let _ = writeln!(o, "</ul></div>");
    }
    if v.failures.len() > FAILURES {
        let _ = writeln!(
            o,
            "<p class=\"muted\">... {} more failures (`vramtrace oom` lists all)</p>",
            v.failures.len() - FAILURES
        );
    }
}

fn leaks(o: &mut String, v: &Leaks) {
    let _ = writeln!(o, "<h2>Never freed</h2>");
    if v.groups.is_empty() {
        let _ = writeln!(o, "<p>Nothing: every allocation was freed.</p>");
        return;
    }
    let _ = writeln!(
        o,
        "<p>{} of device memory in {}.</p><table><tr><th>bytes</th><th>blocks</th><th>pid</th><th>device</th><th>kind</th><th>api</th></tr>",
        bytes(v.leaked_bytes),
        crate::units::count(v.leaked_blocks, "block")
    );
    for g in v.groups.iter().take(ROWS) {
        let _ = writeln!(
            o,
            "<tr><td class=\"n\" data-bytes=\"{}\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            g.bytes,
            bytes(g.bytes),
            g.blocks,
            g.pid,
            g.device,
            g.kind,
            esc(&g.who())
        );
    }
    let _ = writeln!(o, "</table>");
}

/// The peak's flamegraph as an image: shown as drawn, its own script never runs in the page.
fn flamegraph(o: &mut String, svg: &str) {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(svg);
    let _ = writeln!(
        o,
        "<h2>Who held the peak</h2><p class=\"muted\">Width: bytes live at each device's peak, by call stack (<code>vramtrace flamegraph</code> draws it interactive).</p><img id=\"vt-flamegraph\" style=\"max-width:100%\" alt=\"flamegraph of the peak\" src=\"data:image/svg+xml;base64,{data}\">"
    );
}
