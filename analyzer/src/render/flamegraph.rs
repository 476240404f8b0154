//! Flamegraphs of live bytes: folded stacks (`frame;frame;... bytes`, the format other
//! tools read) and their SVG, drawn by inferno.

use super::escape::{self, folded};
use crate::views::groups::Group;
use crate::views::leaks::LeakGroup;
use crate::views::peak::PeakView;
use crate::views::stacks::ShownFrame;
use vramtrace_schema::Kind;

/// One folded line per group: `GPU;pid N;outermost;...;innermost;API bytes`.
pub fn folded_peak(view: &PeakView) -> Vec<String> {
    folded_groups(
        &view
            .devices
            .iter()
            .map(|d| (d.host.as_str(), d.gpu.as_str(), &d.groups[..]))
            .collect::<Vec<_>>(),
    )
}

/// [`folded_peak`] of each device's groups: (host, gpu, groups).
pub fn folded_groups(devices: &[(&str, &str, &[Group])]) -> Vec<String> {
    folded_groups_named(devices, |_, pid| format!("pid {pid}"))
}

/// [`folded_groups`] with each process's frame named by `name(host, pid)` (the report
/// names a snapshot by its file).
pub fn folded_groups_named(
    devices: &[(&str, &str, &[Group])],
    name: impl Fn(&str, u32) -> String,
) -> Vec<String> {
    let many = devices.len() > 1;
    let mut lines = Vec::new();
    for (host, gpu, groups) in devices {
        // A 0-byte group (`cudaMalloc(0)`) has no width; inferno refuses a graph of them.
        for g in groups.iter().filter(|g| g.bytes > 0) {
            let mut parts = Vec::new();
            if many {
                parts.push(format!("{} {}", folded(host), folded(gpu)));
            }
            parts.push(folded(&name(host, g.pid.unwrap_or(0))).into_owned());
            let frames = stack(&g.frames);
            if !frames.is_empty() {
                parts.push(frames);
            }
            parts.push(g.api.to_string());
            lines.push(format!("{} {}", parts.join(";"), g.bytes));
        }
    }
    lines
}

/// A differential flamegraph of `diff`, as inferno's `diff-folded` writes it: one line a
/// group, `GPU;outermost;...;innermost;API A B` with each run's bytes at its peak; inferno
/// draws B's widths, red where B grew, blue where it shrank.
pub fn folded_diff(view: &crate::views::diff::DiffView) -> Vec<String> {
    let mut lines = Vec::new();
    for d in &view.devices {
        for g in d.groups.iter().filter(|g| g.a_bytes > 0 || g.b_bytes > 0) {
            let mut parts = vec![folded(&d.gpu).into_owned()];
            let frames = stack(&g.frames);
            if !frames.is_empty() {
                parts.push(frames);
            }
            parts.push(g.api.to_string());
            lines.push(format!("{} {} {}", parts.join(";"), g.a_bytes, g.b_bytes));
        }
    }
    lines
}

/// The same for memory never freed: `groups` of one layer (a leaks view's `groups` or
/// `tensor_groups`).
pub fn folded_leaks(groups: &[LeakGroup]) -> Vec<String> {
    groups
        .iter()
        // Tensors (the allocated layer) are inside device memory; pinned host memory and
        // managed pools are not on the card.
        .filter(|g| (g.device_memory() || g.kind == Kind::Allocated.name()) && g.bytes > 0)
        .map(|g| {
            let mut parts = vec![format!("pid {}", g.pid)];
            let frames = stack(&g.frames);
            if !frames.is_empty() {
                parts.push(frames);
            }
            parts.push(g.api.to_string());
            format!("{} {}", parts.join(";"), g.bytes)
        })
        .collect()
}

/// An SVG flamegraph of folded lines (bytes as the width), titled `title`; without lines,
/// one bar saying `nothing` (`nothing live`, `nothing leaked`).
pub fn svg(lines: &[String], title: &str, nothing: &str) -> Result<String, String> {
    svg_of_width(lines, title, nothing, None)
}

/// [`svg`] `width` pixels wide; `None`: as wide as where it is shown (inferno's script
/// sizes it when the SVG is opened as a file).
pub fn svg_of_width(
    lines: &[String],
    title: &str,
    nothing: &str,
    width: Option<usize>,
) -> Result<String, String> {
    let mut options = inferno::flamegraph::Options::default();
    options.image_width = width;
    options.title = title.to_string();
    options.count_name = "bytes".into();
    options.name_type = "Allocated by:".into();
    // inferno sums the counts unchecked: counts of a hostile input (blocks of about 2^63
    // bytes) that cannot add up are refused here, not left to overflow there.
    // A differential line (`stack A B`, from `diff`) has two counts: each column is summed.
    let total = lines.iter().try_fold((0u64, 0u64), |(b, a), l| {
        let mut counts = l.rsplit(' ').map(|c| c.parse::<u64>().ok());
        let last = counts.next().flatten().unwrap_or(0);
        let before = counts.next().flatten().unwrap_or(0);
        Some((b.checked_add(last)?, a.checked_add(before)?))
    });
    if total.is_none_or(|(b, a)| b.max(a) > usize::MAX as u64) {
        return Err("flamegraph: its bytes add up past 2^64, which no run holds: not drawn".into());
    }
    let mut out = Vec::new();
    if lines.is_empty() {
        // inferno refuses empty input; a run with nothing live still gets a picture.
        let empty = [format!("{nothing} 1")];
        inferno::flamegraph::from_lines(&mut options, empty.iter().map(String::as_str), &mut out)
    } else {
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
    }
    .map_err(|e| format!("flamegraph: {e}"))?;
    String::from_utf8(out).map_err(|e| format!("flamegraph: {e}"))
}

/// `outer;...;inner`: the stack for folded-stack text (flamegraphs), outermost first.
fn stack(frames: &[ShownFrame]) -> String {
    frames
        .iter()
        .rev()
        .map(|f| escape::folded(&f.text))
        .collect::<Vec<_>>()
        .join(";")
}
