//! The ranks' spread as text: a few lines under the verdict, however many ranks there are.

use super::escape::terminal as t;
use crate::units;
use crate::views::rank_spread::RankSpread;
use std::fmt::Write;

/// Failures named one by one; the rest are counted.
const FAILURES_NAMED: usize = 5;

/// What the ranks' peaks count, in words.
pub fn layer_words(s: &RankSpread) -> &'static str {
    if s.layer == "allocated" {
        "tensors, requested bytes"
    } else {
        "reserved"
    }
}

pub fn text(o: &mut String, s: &RankSpread, start_unix_ns: u64) {
    let layer = layer_words(s);
    let _ = writeln!(
        o,
        "ranks: {} ranks, peaks ({layer}) from {} (rank {}) to {} (rank {}), median {} (rank {})",
        s.ranks,
        units::bytes(s.min_bytes),
        t(&s.min_rank),
        units::bytes(s.max_bytes),
        t(&s.max_rank),
        units::bytes(s.median_bytes),
        t(&s.median_rank),
    );
    if !s.outliers.is_empty() {
        let _ = writeln!(
            o,
            "  {} above the median; the furthest:",
            units::count(s.above_median as u64, "rank")
        );
    }
    for r in &s.outliers {
        let _ = writeln!(
            o,
            "    rank {} (pid {} on {}): {}, {} above{}",
            t(&r.rank),
            r.pid,
            t(&r.host),
            units::bytes(r.peak_bytes),
            units::bytes(r.above_median_bytes),
            if r.holds_more.is_empty() {
                String::new()
            } else {
                format!("; more than rank {} held of:", t(&s.median_rank))
            }
        );
        for m in &r.holds_more {
            let _ = writeln!(
                o,
                "      {:>10} more  {}",
                units::bytes(m.bytes - m.median_rank_bytes),
                t(&m.who)
            );
        }
    }
    if let Some(first) = s.failures.first() {
        let named: Vec<String> = s
            .failures
            .iter()
            .take(FAILURES_NAMED)
            .map(|f| {
                format!(
                    "rank {} at {}",
                    t(&f.rank),
                    units::when(start_unix_ns, f.time_ns)
                )
            })
            .collect();
        let rest = s.failures.len().saturating_sub(FAILURES_NAMED);
        let _ = writeln!(
            o,
            "  out of memory first: rank {} (asked for {}); in order: {}{}",
            t(&first.rank),
            units::bytes(first.requested_bytes),
            named.join(", "),
            if rest > 0 {
                format!(", and {rest} more")
            } else {
                String::new()
            }
        );
    }
}
