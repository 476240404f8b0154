//! A minimal SVG line plot of live bytes over time (no plotting crate: a few hundred
//! lines of polyline and axes build in no time on a 2-core CI, and the output is small).

use super::escape::markup as esc;
use crate::units;
use crate::views::timeline::{Timeline, TimelineSeries};
use std::fmt::Write;

const W: f64 = 860.0;
const H: f64 = 280.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;
const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One plot per GPU: the run total and, when several processes share it, each process.
pub fn plots(t: &Timeline) -> Vec<(String, String)> {
    let mut gpus: Vec<(&str, &str)> = t
        .series
        .iter()
        .map(|s| (s.host.as_str(), s.gpu.as_str()))
        .collect();
    gpus.sort();
    gpus.dedup();
    let many_hosts = gpus.iter().any(|g| g.0 != gpus[0].0);
    gpus.iter()
        .map(|&(host, gpu)| {
            let mut lines: Vec<&TimelineSeries> = t
                .series
                .iter()
                .filter(|s| s.host == host && s.gpu == gpu)
                // Fragmentation's details stay in the JSON and CSV: the plot shows bytes held.
                .filter(|s| {
                    !matches!(
                        s.layer,
                        "internal_free" | "largest_free_block" | "free_blocks"
                    )
                })
                .collect();
            let processes = lines
                .iter()
                .filter(|s| s.scope == "process" && s.layer == "reserved")
                .count();
            if processes <= 1 {
                // One process: its reserved line is the run's; its other layers stay.
                lines.retain(|s| s.scope == "run" || s.layer != "reserved");
            }
            let title = crate::run::devices::gpu_label(host, gpu, many_hosts);
            let svg = plot(&title, &lines);
            (title, svg)
        })
        .collect()
}

/// The whole timeline as one SVG document (plots stacked).
pub fn document(t: &Timeline) -> String {
    let plots = plots(t);
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        H * plots.len().max(1) as f64
    );
    for (i, (_, svg)) in plots.iter().enumerate() {
        let _ = writeln!(
            o,
            "<g transform=\"translate(0,{})\">{svg}</g>",
            H * i as f64
        );
    }
    o.push_str("</svg>\n");
    o
}

fn label(s: &TimelineSeries) -> String {
    let who = match s.pid {
        Some(pid) => format!(
            "pid {pid}{}",
            s.rank
                .as_ref()
                .map(|r| format!(" rank {r}"))
                .unwrap_or_default()
        ),
        None => "all processes".into(),
    };
    if s.layer == "reserved" {
        who
    } else {
        format!("{who} {}", s.layer.replace('_', " "))
    }
}

/// A nice step for about `n` ticks over `range` (1, 2 or 5 times a power of `base`).
fn tick_step(range: f64, n: f64, base: f64) -> f64 {
    let raw = (range / n).max(f64::MIN_POSITIVE);
    let mag = base.powf(raw.log(base).floor());
    [1.0, 2.0, 5.0, base]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(base * mag)
}

/// An SVG fragment (no root element) of `H` height.
pub fn plot(title: &str, lines: &[&TimelineSeries]) -> String {
    let t_end = lines
        .iter()
        .filter_map(|s| s.points.last())
        .map(|p| p.time_ns)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let y_max = lines
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.max_bytes))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / t_end;
    let y = |b: f64| TOP + (H - TOP - BOTTOM) * (1.0 - b / y_max);
    let mut o = String::new();
    let _ = write!(
        o,
        "<text x=\"{LEFT}\" y=\"18\" font-weight=\"bold\">{}</text>",
        esc(title)
    );
    let _ = write!(
        o,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>",
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    let ystep = tick_step(y_max, 4.0, 2.0);
    let mut v = 0.0;
    while v <= y_max {
        let yv = y(v);
        let _ = write!(
            o,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{yv:.1}\" y2=\"{yv:.1}\" stroke=\"#eee\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            yv + 4.0,
            units::bytes(v as u64),
        );
        v += ystep;
    }
    let xstep = tick_step(t_end / 1e9, 6.0, 10.0);
    let mut s = 0.0;
    while s * 1e9 <= t_end {
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            x(s * 1e9),
            H - BOTTOM + 14.0,
            trim_secs(s)
        );
        s += xstep;
    }
    let _ = write!(
        o,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">seconds since the run's start</text>",
        W - RIGHT,
        H - 8.0
    );
    for (i, series) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts = String::new();
        for p in &series.points {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                x(p.time_ns as f64),
                y(p.max_bytes as f64)
            );
        }
        let _ = write!(
            o,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
            pts.trim_end(),
            esc(&label(series))
        );
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{}\" fill=\"{color}\">{}</text>",
            LEFT + 10.0 + 150.0 * i as f64,
            TOP + 14.0,
            esc(&label(series))
        );
    }
    o
}

fn trim_secs(s: f64) -> String {
    let t = format!("{s:.6}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}s")
}
