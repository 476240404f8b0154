//! One GPU's plot as SVG, for `timeline --svg` and the report alike: the layers as step
//! lines on one clock, the capacity, the peak, each failure, markers and phases as bands.
//! It scales with its container (a viewBox, no fixed size). The axes fit the data: the
//! y-axis ends at a tick at or above everything drawn; a line or the capacity far above
//! the rest (NVML's device line counts the CUDA context and other programs; an 80 GiB
//! card under a 2 GiB run) would flatten the others, so it is clipped at the top and said
//! so in a note under the plot.

use super::escape::markup as esc;
use crate::units;
use crate::views::plot::{DevicePlot, Line};
use std::fmt::Write;

pub const W: f64 = 960.0;
pub const H: f64 = 300.0;
pub const LEFT: f64 = 72.0;
pub const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 54.0;
/// Past this many times the rest, a line or the capacity is clipped instead of scaled.
const SQUASH: f64 = 1.5;
/// A white outline under a label's letters: where labels cross a line or each other
/// (a marker's name over the peak's), each stays readable.
const HALO: &str =
    r##"stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke""##;
/// Markers labelled by name; past this many, only their lines (and tooltips) are drawn.
const LABELLED_MARKERS: usize = 12;

const PROCESS_COLORS: &[&str] = &[
    "#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
];

/// The colour of a layer's line.
pub fn color(line: &Line, i: usize) -> &'static str {
    if line.baseline {
        // The same hue as this run's line of the layer, lighter.
        return match line.layer {
            "allocated" => "#98df8a",
            _ => "#9ecae1",
        };
    }
    match (line.layer, line.who.as_str()) {
        ("device", _) => "#7f7f7f",
        ("reserved", "all processes") => "#1f77b4",
        ("reserved", _) => PROCESS_COLORS[(i + 1) % PROCESS_COLORS.len()],
        ("allocated", _) => "#2ca02c",
        _ => "#ff7f0e",
    }
}

/// A line's dashes: NVML's device line dotted, a baseline's lines dashed.
fn dash(line: &Line) -> &'static str {
    if line.baseline {
        " stroke-dasharray=\"7 3\""
    } else if line.layer == "device" {
        " stroke-dasharray=\"4 2\""
    } else {
        ""
    }
}

/// What the legend calls a line.
pub fn name(line: &Line) -> String {
    let layer = match line.layer {
        "device" => "device (NVML)",
        other => other,
    };
    if line.who == "all processes" {
        layer.to_string()
    } else {
        format!("{layer}, {}", line.who)
    }
}

/// The y-axis top and the notes on what it leaves out.
fn y_scale(p: &DevicePlot) -> (f64, f64, Vec<String>) {
    let most = |l: &Line| l.points.iter().map(|x| x.1).max().unwrap_or(0);
    let others = p
        .lines
        .iter()
        .filter(|l| l.layer != "device")
        .map(most)
        .max()
        .unwrap_or(0)
        .max(p.peak_bytes)
        .max(
            p.failures
                .iter()
                .map(|f| f.requested_bytes)
                .max()
                .unwrap_or(0),
        );
    let mut top = others.max(1) as f64;
    let mut notes = Vec::new();
    let device = p
        .lines
        .iter()
        .filter(|l| l.layer == "device")
        .map(most)
        .max();
    if let Some(d) = device {
        if d as f64 <= top * SQUASH || others == 0 {
            top = top.max(d as f64);
        } else {
            notes.push(format!(
                "device (NVML) reaches {}: clipped at the top, so the other layers keep their scale",
                units::bytes(d)
            ));
        }
    }
    if let Some(c) = p.capacity_bytes {
        if c as f64 <= top * SQUASH {
            top = top.max(c as f64);
        } else {
            notes.push(format!("capacity {}: above the scale", units::bytes(c)));
        }
    }
    // Headroom, so that the highest line does not run along the frame.
    let top = top * 1.04;
    let step = tick_step(top, 5.0, 2.0);
    let top = (top / step).ceil().max(1.0) * step;
    (top, step, notes)
}

/// The time axis's end: the run's last point, failure, marker or phase (a baseline's
/// lines are cut there).
pub fn t_end(p: &DevicePlot) -> f64 {
    p.end_ns().max(1) as f64
}

/// The plot as one `<svg>` element. `id`: the element's id (the report's script finds
/// the plot by it; its `data-` attributes give the time scale). `titled`: with the GPU's
/// name on top (a page's heading says it otherwise).
pub fn svg(p: &DevicePlot, id: &str, titled: bool) -> String {
    let t_end = t_end(p);
    // A snapshot without times (PyTorch before 2.2) is one moment: no clock to draw.
    let timeless = t_end <= 1.0;
    let (y_top, y_step, notes) = y_scale(p);
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * (t / t_end).clamp(0.0, 1.0);
    // Clipped at the top: a clipped line runs along the frame instead of off it.
    let y = |b: f64| TOP + (H - TOP - BOTTOM) * (1.0 - (b / y_top).min(1.0));
    let mut o = String::new();
    let _ = write!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"vt-plot\" viewBox=\"0 0 {W} {H}\" \
         data-left=\"{LEFT}\" data-right=\"{}\" data-tend=\"{t_end}\" data-ytop=\"{y_top}\" data-top=\"{TOP}\" data-bottom=\"{}\" font-family=\"sans-serif\" font-size=\"11\" \
         role=\"img\" aria-label=\"{}\">",
        esc(id),
        W - RIGHT,
        H - BOTTOM,
        esc(&format!("memory over time on {}", p.title))
    );
    if titled {
        let _ = write!(
            o,
            "<text x=\"{LEFT}\" y=\"16\" font-weight=\"bold\" font-size=\"13\">{}</text>",
            esc(&p.title)
        );
    }
    legend(&mut o, p);
    phases(&mut o, p, &x);
    let mut v = 0.0;
    while v <= y_top + y_step / 2.0 {
        let yv = y(v);
        let _ = write!(
            o,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{yv:.1}\" y2=\"{yv:.1}\" stroke=\"#e6e6e6\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            yv + 4.0,
            units::bytes(v as u64),
        );
        v += y_step;
    }
    // The time axis in a group of its own: the report's script redraws it when zoomed.
    o.push_str(r#"<g class="vt-xaxis">"#);
    let x_step = tick_step(t_end / 1e9, 8.0, 10.0);
    let mut s = 0.0;
    while s * 1e9 <= t_end * 1.0001 && !(timeless && s > 0.0) {
        let _ = write!(
            o,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#999\"/><text x=\"{0:.1}\" y=\"{3}\" text-anchor=\"middle\" fill=\"#555\">{4}</text>",
            x(s * 1e9),
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 15.0,
            trim_secs(s)
        );
        s += x_step;
    }
    o.push_str("</g>");
    let _ = write!(
        o,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>",
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    if let Some(c) = p.capacity_bytes.filter(|&c| c as f64 <= y_top) {
        let yc = y(c as f64);
        let _ = write!(
            o,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{yc:.1}\" y2=\"{yc:.1}\" stroke=\"#d62728\" stroke-dasharray=\"6 3\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#d62728\">capacity {}</text>",
            W - RIGHT,
            W - RIGHT - 4.0,
            yc - 4.0,
            units::bytes(c)
        );
    }
    super::plot_areas::draw(&mut o, p, &x, &y, W - RIGHT);
    markers(&mut o, p, &x);
    for (i, line) in p.lines.iter().enumerate() {
        let mut pts = String::new();
        let mut last_y = None;
        for &(t, b) in &line.points {
            let (xt, yb) = (x(t as f64), y(b as f64));
            // Steps: a bucket's most holds until the next bucket begins.
            if let Some(ly) = last_y {
                let _ = write!(pts, "{xt:.1},{ly:.1} ");
            }
            let _ = write!(pts, "{xt:.1},{yb:.1} ");
            last_y = Some(yb);
        }
        let dash = dash(line);
        // The last value holds to the end of the run.
        if let (Some(ly), Some(&(t, _))) = (last_y, line.points.last()) {
            if (t as f64) < t_end || timeless {
                let _ = write!(pts, "{:.1},{ly:.1}", W - RIGHT);
            }
        }
        let _ = write!(
            o,
            "<polyline class=\"vt-line\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{dash} points=\"{}\"><title>{}</title></polyline>",
            color(line, i),
            pts.trim_end(),
            esc(&name(line))
        );
    }
    peak_and_failures(&mut o, p, &x, &y);
    let axis = if timeless {
        "one moment: the input carries no times"
    } else {
        "seconds since the run's start"
    };
    let _ = write!(
        o,
        "<text class=\"vt-axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#555\">{axis}</text>",
        W - RIGHT,
        H - BOTTOM + 30.0
    );
    // Under the time axis and its label, after any notes.
    let row = notes.len().max(1) as f64;
    super::plot_areas::legend(&mut o, p, LEFT, H - BOTTOM + 30.0 + 12.0 * row);
    for (i, n) in notes.iter().enumerate() {
        let _ = write!(
            o,
            "<text x=\"{LEFT}\" y=\"{}\" fill=\"#8a6d00\" class=\"vt-note\">Note: {}</text>",
            H - BOTTOM + 30.0 + 12.0 * i as f64,
            esc(n)
        );
    }
    // The hover, click and brush targets (the report's script); inert in a plain SVG file.
    let _ = write!(
        o,
        "<line class=\"vt-cursor\" x1=\"-10\" x2=\"-10\" y1=\"{TOP}\" y2=\"{}\" stroke=\"#333\" stroke-width=\"1\" visibility=\"hidden\"/>\
         <rect class=\"vt-brush\" x=\"{LEFT}\" y=\"{TOP}\" width=\"0\" height=\"{}\" fill=\"#1f77b4\" fill-opacity=\"0.15\" stroke=\"#1f77b4\" visibility=\"hidden\" pointer-events=\"none\"/>\
         <rect class=\"vt-hit\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"transparent\" pointer-events=\"all\"/></svg>",
        H - BOTTOM,
        H - TOP - BOTTOM,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    o
}

fn legend(o: &mut String, p: &DevicePlot) {
    let mut x = W - RIGHT;
    // Right-aligned, last first: each entry's width from its text's length.
    let mut entries: Vec<(String, &str, &str)> = p
        .lines
        .iter()
        .enumerate()
        .map(|(i, l)| (name(l), color(l, i), dash(l)))
        .collect();
    entries.reverse();
    for (text, c, dash) in entries {
        let w = 6.2 * text.chars().count().min(40) as f64 + 30.0;
        x -= w;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" x2=\"{:.1}\" y1=\"12\" y2=\"12\" stroke=\"{c}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"16\">{}</text>",
            x + 18.0,
            x + 22.0,
            esc(&text)
        );
    }
}

fn phases(o: &mut String, p: &DevicePlot, x: &impl Fn(f64) -> f64) {
    for (i, ph) in p.phases.iter().enumerate() {
        let (x0, x1) = (x(ph.start_ns as f64), x(ph.end_ns as f64));
        let fill = if i % 2 == 0 { "#fff3d6" } else { "#e8f0ff" };
        let _ = write!(
            o,
            "<rect class=\"vt-phase\" data-t=\"{}\" data-t1=\"{}\" x=\"{x0:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{}\" fill=\"{fill}\"><title>{}</title></rect>",
            ph.start_ns,
            ph.end_ns,
            (x1 - x0).max(1.0),
            H - TOP - BOTTOM,
            esc(&format!(
                "phase {} (pid {}): {} to {}",
                ph.name,
                ph.pid,
                units::seconds(ph.start_ns),
                units::seconds(ph.end_ns)
            ))
        );
        if x1 - x0 > 30.0 {
            let _ = write!(
                o,
                "<text class=\"vt-phase-label\" data-t=\"{}\" data-end=\"{}\" data-dx=\"3\" x=\"{:.1}\" y=\"{}\" fill=\"#6b5200\" font-size=\"10\" {HALO}>{}</text>",
                ph.start_ns,
                ph.end_ns,
                x0 + 3.0,
                TOP + 11.0,
                esc(&short(&ph.name, ((x1 - x0) / 6.0) as usize))
            );
        }
    }
}

fn markers(o: &mut String, p: &DevicePlot, x: &impl Fn(f64) -> f64) {
    let labelled = p.markers.len() <= LABELLED_MARKERS;
    for (i, m) in p.markers.iter().enumerate() {
        let xm = x(m.time_ns as f64);
        let _ = write!(
            o,
            "<line class=\"vt-marker\" data-t=\"{}\" x1=\"{xm:.1}\" x2=\"{xm:.1}\" y1=\"{TOP}\" y2=\"{}\" stroke=\"#6b5200\" stroke-dasharray=\"2 3\"><title>{}</title></line>",
            m.time_ns,
            H - BOTTOM,
            esc(&format!(
                "marker {} (pid {}) at {}",
                m.name,
                m.pid,
                units::seconds(m.time_ns)
            ))
        );
        if labelled {
            // Staggered, so that neighbours do not overwrite each other.
            let _ = write!(
                o,
                "<text class=\"vt-marker-label\" data-t=\"{}\" data-dx=\"2\" x=\"{:.1}\" y=\"{}\" fill=\"#6b5200\" font-size=\"10\" {HALO}>{}</text>",
                m.time_ns,
                xm + 2.0,
                TOP + 22.0 + 11.0 * (i % 3) as f64,
                esc(&short(&m.name, 24))
            );
        }
    }
}

fn peak_and_failures(
    o: &mut String,
    p: &DevicePlot,
    x: &impl Fn(f64) -> f64,
    y: &impl Fn(f64) -> f64,
) {
    // As in [`svg`]: a snapshot without times is one moment, its dump.
    let timeless = t_end(p) <= 1.0;
    if p.peak_bytes > 0 {
        let (xp, yp) = (x(p.peak_time_ns as f64), y(p.peak_bytes as f64));
        let anchor = if xp > W - 160.0 { "end" } else { "start" };
        let dx = if anchor == "end" { -7.0 } else { 7.0 };
        let _ = write!(
            o,
            "<circle class=\"vt-peak\" data-t=\"{0}\" cx=\"{xp:.1}\" cy=\"{yp:.1}\" r=\"4\" fill=\"#1f77b4\" stroke=\"#fff\"/><text class=\"vt-peak-label\" data-t=\"{0}\" data-dx=\"7\" x=\"{1:.1}\" y=\"{2:.1}\" text-anchor=\"{anchor}\" font-weight=\"bold\" fill=\"#1f4e79\" {HALO}>peak {3} at {4}</text>",
            p.peak_time_ns,
            xp + dx,
            (yp + 14.0).min(H - BOTTOM - 4.0),
            units::bytes(p.peak_bytes),
            if timeless {
                "its dump".to_string()
            } else {
                units::seconds(p.peak_time_ns)
            }
        );
    }
    for (i, f) in p.failures.iter().enumerate() {
        let xf = x(f.time_ns as f64);
        let who = f
            .rank
            .as_ref()
            .map(|r| format!("rank {r}"))
            .unwrap_or_else(|| format!("pid {}", f.pid));
        let _ = write!(
            o,
            "<line class=\"vt-failure\" data-t=\"{}\" x1=\"{xf:.1}\" x2=\"{xf:.1}\" y1=\"{TOP}\" y2=\"{}\" stroke=\"#d62728\" stroke-width=\"1.5\"><title>{}</title></line>",
            f.time_ns,
            H - BOTTOM,
            esc(&format!(
                "failed allocation of {} by {who} (its device {}) at {}",
                units::bytes(f.requested_bytes),
                f.device,
                units::seconds(f.time_ns)
            ))
        );
        if i < 3 {
            let anchor = if xf > W - 160.0 { "end" } else { "start" };
            let dx = if anchor == "end" { -4.0 } else { 4.0 };
            let _ = write!(
                o,
                "<text class=\"vt-failure-label\" data-t=\"{}\" data-dx=\"4\" x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\" fill=\"#d62728\" font-weight=\"bold\" {HALO}>out of memory: {}</text>",
                f.time_ns,
                xf + dx,
                H - BOTTOM - 6.0 - 12.0 * i as f64,
                units::bytes(f.requested_bytes)
            );
        }
    }
}

/// At most `n` characters, an ellipsis for the rest.
fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
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

fn trim_secs(s: f64) -> String {
    let t = format!("{s:.6}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t}s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::plot::Line;

    const GIB: u64 = 1 << 30;

    fn plot(lines: Vec<Line>, capacity: Option<u64>, peak: u64) -> DevicePlot {
        DevicePlot {
            host: "h".into(),
            gpu: "0".into(),
            title: "GPU 0".into(),
            ranks: Vec::new(),
            lines,
            areas: Vec::new(),
            capacity_bytes: capacity,
            peak_bytes: peak,
            peak_time_ns: 1,
            failures: Vec::new(),
            markers: Vec::new(),
            phases: Vec::new(),
            marks_left_out: 0,
            points_merged: false,
            bucket_ns: 1,
        }
    }

    fn line(layer: &'static str, most: u64) -> Line {
        Line {
            layer,
            who: "all processes".into(),
            points: vec![(0, 0), (1_000, most)],
            baseline: false,
        }
    }

    /// The demo's case: a 23.1 GiB peak on a 24 GiB card; the axis ended at 16 GiB.
    #[test]
    fn the_axis_ends_at_a_tick_above_the_peak_and_the_capacity() {
        let peak = 231 * GIB / 10;
        let (top, step, notes) = y_scale(&plot(vec![line("reserved", peak)], Some(24 * GIB), peak));
        assert!(top >= (24 * GIB) as f64, "{top}");
        assert_eq!(top % step, 0.0, "the top is a tick");
        assert!(notes.is_empty(), "{notes:?}");
        let svg = svg(
            &plot(vec![line("reserved", peak)], Some(24 * GIB), peak),
            "p",
            true,
        );
        assert!(svg.contains(">24.0 GiB</text>") && svg.contains("capacity 24.0 GiB"));
        assert!(svg.contains("viewBox=\"0 0 960 300\""));
    }

    /// NVML's line far above the rest (the context, other programs) and an 80 GiB card
    /// under a 40 MiB run would flatten the other layers: both are left above the scale,
    /// and the notes say so.
    #[test]
    fn a_line_or_capacity_far_above_the_rest_is_clipped_and_noted() {
        let mib = 1 << 20;
        let lines = vec![line("device", 340 * mib), line("reserved", 40 * mib)];
        let (top, _, notes) = y_scale(&plot(lines, Some(80 * GIB), 40 * mib));
        assert!(top < (60 * mib) as f64, "{top}");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("device (NVML) reaches 340.0 MiB: clipped"));
        assert!(notes[1].starts_with("capacity 80.0 GiB: above the scale"));
    }
}
