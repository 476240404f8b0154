//! `timeline --svg`: every GPU's plot (render/plot.rs, the report's too) stacked in one
//! SVG document.

use super::plot;
use crate::views::plot::DevicePlot;
use std::fmt::Write;

/// The plots stacked in one document that scales (a viewBox; 960 wide by default).
pub fn document(plots: &[DevicePlot]) -> String {
    let h = plot::H * plots.len().max(1) as f64;
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {h}\" width=\"{}\" height=\"{h}\">\n",
        plot::W,
        plot::W
    );
    for (i, p) in plots.iter().enumerate() {
        // A nested svg keeps each plot's own viewBox; y places it.
        let inner = plot::svg(p, &format!("vt-plot-{i}"), true);
        let inner = inner.replacen(
            "<svg ",
            &format!(
                "<svg y=\"{}\" width=\"{}\" height=\"{}\" ",
                plot::H * i as f64,
                plot::W,
                plot::H
            ),
            1,
        );
        let _ = writeln!(o, "{inner}");
    }
    o.push_str("</svg>\n");
    o
}
