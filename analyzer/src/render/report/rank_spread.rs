//! The ranks' spread on the page: the same sentences as `summary`'s, and a histogram of
//! every rank's peak, so that a thousand ranks read at a glance.

use super::super::escape::markup as esc;
use crate::units::{self, bytes};
use crate::views::rank_spread::RankSpread;
use crate::views::ranks::RankRow;
use std::fmt::Write;

/// Bars of the histogram.
const BARS: usize = 40;
const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 140.0;

pub fn html(o: &mut String, spread: &RankSpread, rows: &[RankRow], start_unix_ns: u64) {
    let layer = crate::render::rank_spread::layer_words(spread);
    let _ = write!(
        o,
        "<p class=\"vt-spread\">{} ranks, peaks ({layer}) from <b>{}</b> (rank {}) to <b>{}</b> (rank {}), median <b>{}</b> (rank {}).",
        spread.ranks,
        bytes(spread.min_bytes),
        esc(&spread.min_rank),
        bytes(spread.max_bytes),
        esc(&spread.max_rank),
        bytes(spread.median_bytes),
        esc(&spread.median_rank),
    );
    if let Some(first) = spread.failures.first() {
        let _ = write!(
            o,
            " <span class=\"bad\">Out of memory first: rank {} at {} (asked for {}); {} in all.</span>",
            esc(&first.rank),
            esc(&units::when(start_unix_ns, first.time_ns)),
            bytes(first.requested_bytes),
            units::count(spread.failures.len() as u64, "rank")
        );
    }
    let _ = writeln!(o, "</p>");
    histogram(o, spread, rows);
    if spread.outliers.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<p>{} above the median; the furthest, and what each held more of than rank {} did at its peak:</p><ul class=\"vt-outliers\">",
        units::count(spread.above_median as u64, "rank"),
        esc(&spread.median_rank)
    );
    for r in &spread.outliers {
        let _ = write!(
            o,
            "<li>rank {} ({} on {}): <b>{}</b>, {} above",
            esc(&r.rank),
            r.pid,
            esc(&r.host),
            bytes(r.peak_bytes),
            bytes(r.above_median_bytes)
        );
        if !r.holds_more.is_empty() {
            let _ = write!(o, "<ul>");
            for m in &r.holds_more {
                let _ = write!(
                    o,
                    "<li>{} more: <code>{}</code></li>",
                    bytes(m.bytes - m.median_rank_bytes),
                    esc(&m.who)
                );
            }
            let _ = write!(o, "</ul>");
        }
        let _ = writeln!(o, "</li>");
    }
    let _ = writeln!(o, "</ul>");
}

/// Ranks per bar of equal width between the least and the most peak.
fn histogram(o: &mut String, spread: &RankSpread, rows: &[RankRow]) {
    let by_tensors = spread.layer == "allocated";
    let peak = |r: &RankRow| r.compared_peak(by_tensors);
    let (lo, hi) = (spread.min_bytes, spread.max_bytes);
    let span = (hi - lo).max(1);
    let mut bars = [0usize; BARS];
    for r in rows {
        let k = ((peak(r) - lo) as u128 * BARS as u128 / span as u128) as usize;
        bars[k.min(BARS - 1)] += 1;
    }
    let most = bars.iter().copied().max().unwrap_or(1).max(1);
    let bar_w = WIDTH / BARS as f64;
    let _ = write!(
        o,
        "<svg class=\"vt-histogram\" viewBox=\"0 0 {WIDTH} {}\" role=\"img\" aria-label=\"ranks by peak\">",
        HEIGHT + 20.0
    );
    for (k, &n) in bars.iter().enumerate().filter(|(_, &n)| n > 0) {
        let h = (n as f64 / most as f64 * (HEIGHT - 14.0)).max(1.0);
        let from = lo + (span as u128 * k as u128 / BARS as u128) as u64;
        let to = lo + (span as u128 * (k as u128 + 1) / BARS as u128) as u64;
        let _ = write!(
            o,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"#4477aa\"><title>{} from {} to {}</title></rect>",
            k as f64 * bar_w + 1.0,
            HEIGHT - h,
            bar_w - 2.0,
            units::count(n as u64, "rank"),
            bytes(from),
            bytes(to)
        );
    }
    let median_x = (spread.median_bytes - lo) as f64 / span as f64 * WIDTH;
    let _ = write!(
        o,
        "<line x1=\"{median_x:.1}\" x2=\"{median_x:.1}\" y1=\"0\" y2=\"{HEIGHT}\" stroke=\"#222\" stroke-dasharray=\"4 3\"/>\
         <text x=\"0\" y=\"{y}\" font-size=\"12\">{}</text>\
         <text x=\"{median_x:.1}\" y=\"{y}\" font-size=\"12\" text-anchor=\"middle\">median {}</text>\
         <text x=\"{WIDTH}\" y=\"{y}\" font-size=\"12\" text-anchor=\"end\">{}</text></svg>",
        bytes(lo),
        bytes(spread.median_bytes),
        bytes(hi),
        y = HEIGHT + 16.0
    );
}
