//! The allocated layer's categories as stacked areas under a plot's lines, and their
//! legend: parameters at the bottom, then gradients, optimizer state, activations, other
//! tensors and those not known, each the bytes it held when the tensors summed most in
//! the point's time.

use super::escape::markup as esc;
use crate::views::plot::{Area, DevicePlot};
use std::fmt::Write;

/// The fill of each category's area, in the order of `timeline_categories::LAYERS`.
const FILLS: [&str; 6] = [
    "#6baed6", "#fd8d3c", "#9e9ac8", "#74c476", "#fdd0a2", "#d9d9d9",
];

fn index(a: &Area) -> Option<usize> {
    crate::views::timeline_categories::index(a.layer)
}

fn fill(a: &Area) -> &'static str {
    index(a).map_or("#d9d9d9", |i| FILLS[i])
}

/// What the legend calls an area: `optimizer state`.
pub fn name(a: &Area) -> &'static str {
    match index(a).map(|i| crate::model::Category::ALL[i]) {
        Some(crate::model::Category::Other) if a.layer.starts_with("reserved:") => "other",
        Some(c) => c.words(),
        None => "tensors",
    }
}

/// The areas, stacked, as step shapes like the lines; `right`: the plot's right edge,
/// where the last values hold to.
pub fn draw(
    o: &mut String,
    p: &DevicePlot,
    x: &impl Fn(f64) -> f64,
    y: &impl Fn(f64) -> f64,
    right: f64,
) {
    let Some(n) = p.areas.iter().map(|a| a.points.len()).min() else {
        return;
    };
    let mut below = vec![0u64; n];
    for a in &p.areas {
        let above: Vec<u64> = (0..n)
            .map(|i| below[i].saturating_add(a.points[i].1))
            .collect();
        let edge = |values: &[u64]| -> Vec<(f64, f64)> {
            let mut pts = Vec::with_capacity(2 * n + 1);
            for (i, &v) in values.iter().enumerate().take(n) {
                let x0 = x(a.points[i].0 as f64);
                let x1 = a.points.get(i + 1).map_or(right, |q| x(q.0 as f64));
                let yv = y(v as f64);
                pts.push((x0, yv));
                pts.push((x1, yv));
            }
            pts
        };
        let mut shape = edge(&above);
        shape.extend(edge(&below).into_iter().rev());
        let mut points = String::new();
        for (px, py) in shape {
            let _ = write!(points, "{px:.1},{py:.1} ");
        }
        let _ = write!(
            o,
            "<polygon class=\"vt-area\" fill=\"{}\" fill-opacity=\"0.6\" stroke=\"none\" points=\"{}\"><title>{}</title></polygon>",
            fill(a),
            points.trim_end(),
            esc(&format!("{} ({})", name(a), a.who))
        );
        below = above;
    }
}

/// The areas' legend, left to right at (`x`, `y`): a swatch and a name each.
pub fn legend(o: &mut String, p: &DevicePlot, x: f64, y: f64) {
    if p.areas.is_empty() {
        return;
    }
    let mut at = x;
    let what = if p.areas[0].layer.starts_with("reserved:") {
        "reserved by category"
    } else {
        "tensors by category"
    };
    let _ = write!(
        o,
        "<text class=\"vt-area-legend\" x=\"{at:.1}\" y=\"{y:.1}\" fill=\"#555\">{what} (whole run):</text>"
    );
    at += 200.0;
    for a in &p.areas {
        let text = name(a);
        let _ = write!(
            o,
            "<rect class=\"vt-area-legend\" x=\"{at:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\" fill-opacity=\"0.6\"/><text class=\"vt-area-legend\" x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            y - 9.0,
            fill(a),
            at + 14.0,
            esc(text)
        );
        at += 6.2 * text.chars().count() as f64 + 30.0;
    }
}
