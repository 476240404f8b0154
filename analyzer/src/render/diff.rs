//! `diff` as text: the verdict of each GPU first, then its figures by layer, then the
//! groups that changed.

use super::escape::terminal as t;
use crate::units;
use crate::views::diff::{Change, DeviceDiff, DiffView};
use crate::views::diff_phases::PhaseDiff;
use std::fmt::Write;

/// `+1.2 GiB`, `-3.0 MiB`, `0 B`.
fn signed(n: i128) -> String {
    let size = units::bytes(u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX));
    match n.signum() {
        1 => format!("+{size}"),
        -1 => format!("-{size}"),
        _ => size,
    }
}

fn layer_words(layer: &str) -> &'static str {
    match layer {
        "allocated" => "allocated layer: tensors, requested bytes",
        _ => "reserved layer: device memory from the driver",
    }
}

/// The one line a reader needs first.
pub fn verdict(d: &DeviceDiff) -> String {
    let layer = d.layer;
    let (a, b) = (d.a.peak_bytes, d.b.peak_bytes);
    let diff = d.difference.peak_bytes;
    let words = layer_words(layer);
    if diff == 0 {
        return format!(
            "{}: the same peak in both, {} ({words})",
            t(&d.gpu),
            units::bytes(a)
        );
    }
    let how = if diff > 0 {
        super::style::bad("higher")
    } else {
        super::style::good("lower")
    };
    let share = match a {
        0 => String::new(),
        _ => {
            let change = u64::try_from(diff.unsigned_abs()).unwrap_or(u64::MAX);
            format!(" ({})", units::percent(change, a))
        }
    };
    // The largest change, and where it has no stack (tensors from before a snapshot's
    // history) the largest that has one after it: that is code to look at.
    let mut changed = d.groups.iter().filter(|g| g.change != Change::Same);
    let top = changed
        .next()
        .map(|g| {
            let then = match g.frames.is_empty() {
                true => changed
                    .find(|x| !x.frames.is_empty())
                    .map(|x| {
                        format!(
                            ", then {} from {}",
                            signed(x.difference_bytes),
                            t(&x.site())
                        )
                    })
                    .unwrap_or_default(),
                false => String::new(),
            };
            format!(
                "; the largest change: {} from {}{then}",
                signed(g.difference_bytes),
                t(&g.site())
            )
        })
        .unwrap_or_default();
    format!(
        "{}: B's peak is {}{share} {how} than A's: {} against {} ({words}){top}",
        t(&d.gpu),
        units::bytes(u64::try_from(diff.unsigned_abs()).unwrap_or(u64::MAX)),
        units::bytes(b),
        units::bytes(a)
    )
}

pub fn text(v: &DiffView, limit: usize) -> String {
    let mut o = String::new();
    for d in &v.devices {
        let _ = writeln!(o, "{}", verdict(d));
    }
    if v.devices.is_empty() {
        let _ = writeln!(o, "the two runs used no GPU in common");
    }
    for (gpus, only) in [(&v.only_in_a, "A"), (&v.only_in_b, "B")] {
        for g in gpus {
            let _ = writeln!(o, "{}: only in {only}", t(g));
        }
    }
    for d in &v.devices {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{:<36}  {:>12}  {:>12}  {:>12}",
            t(&d.gpu),
            "A",
            "B",
            "B - A"
        );
        let opt = |x: Option<u64>| x.map_or("-".to_string(), units::bytes);
        let rows = [
            (
                "peak allocated (tensors)",
                opt(d.a.peak_allocated_bytes),
                opt(d.b.peak_allocated_bytes),
                d.difference.peak_allocated_bytes,
            ),
            (
                "peak reserved",
                units::bytes(d.a.peak_reserved_bytes),
                units::bytes(d.b.peak_reserved_bytes),
                Some(d.difference.peak_reserved_bytes),
            ),
            (
                "reserved at the run's end",
                units::bytes(d.a.reserved_bytes_at_end),
                units::bytes(d.b.reserved_bytes_at_end),
                Some(d.difference.reserved_bytes_at_end),
            ),
            (
                "peak device (the driver's figure)",
                opt(d.a.peak_device_bytes),
                opt(d.b.peak_device_bytes),
                d.difference.peak_device_bytes,
            ),
        ];
        for (name, a, b, diff) in rows {
            let diff = diff.map_or("-".to_string(), signed);
            let _ = writeln!(o, "  {name:<34}  {a:>12}  {b:>12}  {diff:>12}");
        }
        let held = d
            .categories
            .iter()
            .filter(|c| c.a_bytes > 0 || c.b_bytes > 0);
        for (i, c) in held.enumerate() {
            if i == 0 {
                let _ = writeln!(
                    o,
                    "  the tensors at each peak, by what they were for (as summary says how each run knows it):"
                );
            }
            let _ = writeln!(
                o,
                "    {:<32}  {:>12}  {:>12}  {:>12}",
                c.category.words(),
                units::bytes(c.a_bytes),
                units::bytes(c.b_bytes),
                signed(c.difference_bytes)
            );
        }
        let changed: Vec<_> = d
            .groups
            .iter()
            .filter(|g| g.change != Change::Same)
            .collect();
        let same = d.groups.len() - changed.len();
        let _ = writeln!(
            o,
            "  who made the difference (groups at each run's peak, matched by their frames):"
        );
        let unit = if v.layer == "allocated" {
            "tensor"
        } else {
            "block"
        };
        for g in changed.iter().take(limit) {
            let change = match g.change {
                Change::Grown => "grown",
                Change::Shrunk => "shrunk",
                Change::New => "new",
                Change::Gone => "gone",
                Change::Same => "same",
            };
            let _ = writeln!(
                o,
                "  {:>12}  {change:<6}  {} -> {}  {}",
                signed(g.difference_bytes),
                units::count(g.a_blocks, unit),
                units::count(g.b_blocks, unit),
                t(&g.who())
            );
        }
        if changed.len() > limit {
            let _ = writeln!(
                o,
                "  ... {} more changed groups (--json lists all)",
                changed.len() - limit
            );
        }
        if changed.is_empty() {
            let _ = writeln!(o, "  none: every group holds the same bytes in both");
        }
        if same > 0 {
            let _ = writeln!(
                o,
                "  {} the same in both",
                units::count(same as u64, "group")
            );
        }
    }
    phases(&mut o, v, limit);
    o
}

/// Phase by phase: the largest changes of the peak inside a phase, then what only one
/// run has.
fn phases(o: &mut String, v: &DiffView, limit: usize) {
    if v.phases.is_empty() {
        return;
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "by phase (the peak inside each; {}):",
        layer_words(v.layer)
    );
    let mut changed: Vec<_> = v
        .phases
        .iter()
        .filter(|p| p.difference_bytes.is_some_and(|d| d != 0))
        .collect();
    changed.sort_by_key(|p| std::cmp::Reverse(p.difference_bytes.unwrap_or(0).abs()));
    for p in changed.iter().take(limit) {
        let (a, b) = (p.a_peak_bytes.unwrap_or(0), p.b_peak_bytes.unwrap_or(0));
        let _ = writeln!(
            o,
            "  {:>12}  {}: {} against {}",
            signed(p.difference_bytes.unwrap_or(0)),
            t(&phase_name(p)),
            units::bytes(b),
            units::bytes(a)
        );
    }
    if changed.len() > limit {
        let _ = writeln!(
            o,
            "  ... {} more changed phases (--json lists all)",
            changed.len() - limit
        );
    }
    let same = v
        .phases
        .iter()
        .filter(|p| p.difference_bytes == Some(0))
        .count();
    if same > 0 {
        let _ = writeln!(
            o,
            "  {} the same in both",
            units::count(same as u64, "phase")
        );
    }
    for (side, only) in [("A", true), ("B", false)] {
        let names: Vec<String> = v
            .phases
            .iter()
            .filter(|p| p.difference_bytes.is_none() && p.a_peak_bytes.is_some() == only)
            .map(|p| t(&phase_name(p)).into_owned())
            .collect();
        if !names.is_empty() {
            let shown: Vec<&str> = names.iter().take(limit).map(String::as_str).collect();
            let more = match names.len() > limit {
                true => format!(" and {} more", names.len() - limit),
                false => String::new(),
            };
            let _ = writeln!(o, "  only in {side}: {}{more}", shown.join(", "));
        }
    }
    if v.markers_not_kept > 0 {
        let _ = writeln!(
            o,
            "  {} past a run's first 10,000 were not kept: the phases they close are not compared",
            units::count(v.markers_not_kept, "marker")
        );
    }
}

/// `forward #3`, `rank 2 forward #3`.
fn phase_name(p: &PhaseDiff) -> String {
    match &p.rank {
        Some(r) => format!("rank {r} {} #{}", p.name, p.occurrence),
        None => format!("{} #{}", p.name, p.occurrence),
    }
}
