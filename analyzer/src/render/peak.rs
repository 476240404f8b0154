//! `peak` as text.

use super::escape::terminal as t;
use crate::units;
use crate::views::peak::PeakView;
use std::fmt::Write;

/// What the text lists each device's live set by.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Group,
    Category,
    /// PyTorch's labels: `user_metadata`, private pools.
    Label,
}

pub fn text(v: &PeakView, limit: usize, by: By) -> String {
    let mut o = String::new();
    let hosts: std::collections::BTreeSet<&str> =
        v.devices.iter().map(|d| d.host.as_str()).collect();
    if v.devices.is_empty() {
        let _ = writeln!(o, "no device memory was held");
    }
    for d in &v.devices {
        let label = crate::replay::devices::gpu_label(&d.host, &d.gpu, hosts.len() > 1);
        let label = t(&label);
        let what = if v.at_ns.is_some() { "live" } else { "peak" };
        let (of, unit) = match d.layer {
            "allocated" => (" of tensors (requested bytes)", "tensor"),
            _ => ("", "block"),
        };
        let _ = writeln!(
            o,
            "{label}: {what} {}{of} in {} at {}",
            units::bytes(d.live_bytes),
            units::count(d.live_blocks, unit),
            units::when(v.start_unix_ns, d.time_ns)
        );
        if let Some(f) = &d.top_function {
            let file = f
                .file
                .as_deref()
                .map(|p| format!(" ({})", t(p)))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "  most held by {}{file}: {}",
                t(&f.function),
                units::bytes(f.bytes)
            );
        }
        if d.processes.len() > 1 {
            for p in &d.processes {
                let rank = p
                    .rank
                    .as_ref()
                    .map(|r| format!(" (rank {})", t(r)))
                    .unwrap_or_default();
                let _ = writeln!(o, "  {:>12}  pid {}{rank}", units::bytes(p.bytes), p.pid);
            }
        }
        if by == By::Category {
            match &d.categories {
                Some(c) => {
                    categories(&mut o, c);
                    continue;
                }
                None => {
                    let _ = writeln!(
                        o,
                        "  what the tensors were for is not known here (a PyTorch snapshot says it): by who allocated"
                    );
                }
            }
        }
        if by == By::Label {
            if d.labels.is_empty() {
                let _ = writeln!(
                    o,
                    "  no tensor has a label here (a snapshot's user_metadata or private pool): by who allocated"
                );
            } else {
                labels(&mut o, &d.labels, d.layer);
                continue;
            }
        }
        let _ = writeln!(
            o,
            "  {:>12}  {:>6}  {:>8}  {:>6}  who allocated",
            "bytes", "blocks", "pid", "device"
        );
        for g in d.groups.iter().take(limit) {
            let _ = writeln!(
                o,
                "  {:>12}  {:>6}  {:>8}  {:>6}  {}",
                units::bytes(g.bytes),
                g.blocks,
                g.pid.unwrap_or(0),
                g.device.unwrap_or(0),
                t(&g.who())
            );
        }
        if d.groups.len() > limit {
            let _ = writeln!(
                o,
                "  ... {} more groups (--json lists all)",
                d.groups.len() - limit
            );
        }
    }
    o
}

/// A device's tensors by category, largest first (inferred: said in the heading).
fn categories(o: &mut String, c: &crate::views::categories::Categories) {
    let _ = writeln!(
        o,
        "  {:>12}  {:>7}  what they were for ({})",
        "bytes",
        "tensors",
        crate::views::categories::how(c)
    );
    for s in crate::views::categories::largest_first(c) {
        let _ = writeln!(
            o,
            "  {:>12}  {:>7}  {}",
            units::bytes(s.bytes),
            s.tensors,
            s.category.words()
        );
    }
}

/// A device's live set by PyTorch's labels, largest first.
fn labels(o: &mut String, labels: &[crate::views::peak::LabelBytes], layer: &str) {
    let unit = if layer == "allocated" {
        "tensors"
    } else {
        "blocks"
    };
    let _ = writeln!(
        o,
        "  {:>12}  {:>7}  label (PyTorch's user_metadata, private pool)",
        "bytes", unit
    );
    for l in labels {
        let words = l
            .label
            .as_ref()
            .map_or("no label".to_string(), |l| l.words());
        let _ = writeln!(
            o,
            "  {:>12}  {:>7}  {}",
            units::bytes(l.bytes),
            l.blocks,
            t(&words)
        );
    }
}
