//! `summary` as text: one screen.

use super::escape::terminal as t;
use super::summary_verdict::{driver_said, group_line};
use crate::units;
use crate::views::categories;
use crate::views::ending::Ending;
use crate::views::preallocation;
use crate::views::summary::{ProcessSummary, Summary};
use std::fmt::Write;

/// Groups shown per device.
const TOP_GROUPS: usize = 5;

pub fn text(s: &Summary) -> String {
    let mut out = String::new();
    let o = &mut out;
    super::summary_verdict::lines(o, s);
    if let Some(spread) = &s.rank_spread {
        super::rank_spread::text(o, spread, s.start_unix_ns);
    }
    let _ = writeln!(o);
    let many = s.processes.len() > 1;
    let hosts: std::collections::BTreeSet<&str> =
        s.processes.iter().map(|p| p.host.as_str()).collect();
    let _ = writeln!(
        o,
        "run: {}, started {}, {} long",
        units::count(s.processes.len() as u64, "process"),
        units::wall(s.start_unix_ns),
        units::seconds(s.duration_ns)
    );
    for d in &s.devices {
        let label = crate::replay::devices::gpu_label(&d.host, &d.gpu, hosts.len() > 1);
        let label = t(&label);
        let _ = writeln!(
            o,
            "{label}: peak {} reserved at {}; {} at the run's end, once exited processes gave theirs back{}",
            units::bytes(d.peak_reserved_bytes),
            units::when(s.start_unix_ns, d.peak_time_ns),
            units::bytes(d.reserved_bytes_at_end),
            if d.pids.len() > 1 {
                format!(" ({} processes summed)", d.pids.len())
            } else {
                String::new()
            }
        );
        let (groups, unit) = if d.layer == "allocated" {
            let _ = writeln!(
                o,
                "  tensors (allocated layer): peak {} requested; at it:",
                units::bytes(d.peak_requested_bytes.unwrap_or(0))
            );
            (&d.tensors_at_peak, "tensor")
        } else {
            (&d.at_peak, "block")
        };
        for g in groups.iter().take(TOP_GROUPS) {
            let who = if d.pids.len() > 1 {
                format!("  pid {}", g.pid.unwrap_or(0))
            } else {
                String::new()
            };
            group_line(o, "  ", g, unit, &who);
        }
    }
    if many {
        processes_table(o, s);
    }
    if !s.ranks.is_empty() {
        ranks_table(o, s);
    }
    for p in &s.processes {
        let _ = writeln!(o);
        let rank = p
            .rank
            .as_ref()
            .map(|r| format!(", rank {}", t(r)))
            .unwrap_or_default();
        let state = match (&p.cut_by, p.complete) {
            (Some(why), _) => format!(" (trace cut: {why}; the process went on)"),
            (None, true) => String::new(),
            (None, false) => " (trace cut: the process did not exit normally)".into(),
        };
        let _ = writeln!(
            o,
            "process {} on {}{rank}: {}{state}",
            p.pid,
            t(&p.host),
            t(&p.command())
        );
        // Never freed is a leak only for a process that exited; otherwise it is what the
        // process held when it died or the snapshot was taken, as the verdict says.
        let ending = Ending::of_process(p);
        let held = match ending {
            Ending::Exited => "never freed".to_string(),
            e => format!("still held {}", e.when()),
        };
        let _ = writeln!(
            o,
            "  {}: {}, {}, {}; {} ({}) {held}",
            units::count(p.events, "event"),
            units::count(p.allocations, "allocation"),
            units::count(p.frees, "free"),
            units::count(p.failed_allocations, "failed allocation"),
            units::count(p.leaked_blocks, "block"),
            units::bytes(p.leaked_bytes)
        );
        if p.history_truncated == Some(true) {
            let _ = writeln!(
                o,
                "  history truncated: the snapshot says entries before its first were dropped; what they left alive is rebuilt from its final segments"
            );
        }
        if p.calls_not_recorded > 0 {
            let _ = writeln!(
                o,
                "  {} not recorded: vramtrace's queue was full and its writer stalled (docs/host.md)",
                units::count(p.calls_not_recorded, "call")
            );
        }
        for d in &p.devices {
            let tensors = d
                .peak_requested_bytes
                .map(|b| {
                    let blocks = d
                        .peak_allocated_bytes
                        .map(|a| format!(", {} allocated in blocks", units::bytes(a)))
                        .unwrap_or_default();
                    format!("; tensors peak {} requested{blocks}", units::bytes(b))
                })
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "  device {}: peak {} reserved at {}; {} still reserved {}{tensors}",
                d.device,
                units::bytes(d.peak_reserved_bytes),
                units::seconds(d.peak_time_ns),
                units::bytes(d.reserved_bytes_at_end),
                Ending::of_process(p).when()
            );
            if let Some(b) = d.before_history {
                // Said here once, where the figures are rebuilt: the normal case for a
                // snapshot, not a warning on every command.
                let _ = writeln!(
                    o,
                    "    its history begins after the start ({} and {} alive before its first entry, {} reserved): those are counted from the snapshot's final segments",
                    units::count(b.segments as u64, "segment"),
                    units::count(b.tensors as u64, "tensor"),
                    units::bytes(b.reserved_bytes)
                );
            }
            if let Some(c) = &d.tensor_categories_at_peak {
                let _ = writeln!(
                    o,
                    "    the tensors at their peak were ({}): {}",
                    categories::how(c),
                    categories::words(c)
                );
            }
            if let Some(c) = &d.reserved_categories_at_peak {
                let _ = writeln!(
                    o,
                    "    the device memory at its peak was (named by the program's category ranges): {}",
                    categories::reserved_words(c)
                );
            }
            if let Some(split) = &d.split_at_peak {
                let _ = writeln!(
                    o,
                    "    all of it at its reserved peak: {}",
                    crate::views::device_split::line(split)
                );
            }
            if let Some(c) = d
                .tensor_categories_at_end
                .as_ref()
                .filter(|c| c.split.iter().any(|s| s.bytes > 0))
                // Said again only where it reads otherwise than at the peak.
                .filter(|c| {
                    let peak = d.tensor_categories_at_peak.as_ref().map(categories::words);
                    peak != Some(categories::words(c))
                })
            {
                // The allocator's cache beside them: the reserved bytes then are the sum.
                let cache = d
                    .allocated_bytes_at_end
                    .map(|a| d.reserved_bytes_at_end.saturating_sub(a))
                    .filter(|&c| c > 0)
                    .map(|c| format!("; the allocator's cache {}", units::bytes(c)))
                    .unwrap_or_default();
                let _ = writeln!(
                    o,
                    "    the tensors {} were ({}): {}{cache}",
                    Ending::of_process(p).when(),
                    categories::how(c),
                    categories::words(c)
                );
            }
            for g in d.at_peak.iter().take(TOP_GROUPS) {
                group_line(o, "    ", g, "block", "");
            }
            if let Some(n) = preallocation::of(&s.preallocations, p.pid, d.device) {
                let _ = writeln!(o, "    note: {}", n.note());
            }
        }
        if p.peak_pinned_host_bytes > 0 {
            let _ = writeln!(
                o,
                "  pinned host memory: peak {}",
                units::bytes(p.peak_pinned_host_bytes)
            );
        }
        locations(o, p);
        for f in &p.failures {
            let place = match f.location {
                Some(l) => format!("of {l} memory"),
                None => format!("on device {}", f.device),
            };
            let _ = writeln!(
                o,
                "  FAILED at {}: {} of {} {place} -> {}; this process then held {} reserved there{}",
                units::seconds(f.time_ns),
                f.api,
                units::bytes(f.requested_bytes),
                f.result_name,
                units::bytes(f.reserved_bytes),
                driver_said(f)
            );
            if let Some(c) = &f.tensor_categories {
                let _ = writeln!(
                    o,
                    "    its tensors then were ({}): {}",
                    categories::how(c),
                    categories::words(c)
                );
            }
            if let Some(c) = &f.reserved_categories {
                let _ = writeln!(
                    o,
                    "    its device memory then was (named by the program's category ranges): {}",
                    categories::reserved_words(c)
                );
            }
            if let Some(split) = &f.split {
                let _ = writeln!(
                    o,
                    "    all of it then: {}",
                    crate::views::device_split::line(split)
                );
            }
        }
        if let Some(e) = &p.error {
            let _ = writeln!(
                o,
                "  read error: {} (figures cover the lines before it)",
                t(e)
            );
        }
    }
    for u in &s.unreadable {
        let _ = writeln!(o, "\nunreadable: {}", t(u));
    }
    out
}

fn processes_table(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "\n{:>8} {:>5} {:<12} peak per device",
        "pid", "rank", "host"
    );
    for p in &s.processes {
        let peaks: Vec<String> = p
            .devices
            .iter()
            .map(|d| format!("{}: {}", d.device, units::bytes(d.peak_reserved_bytes)))
            .collect();
        let _ = writeln!(
            o,
            "{:>8} {:>5} {:<12} {}",
            p.pid,
            t(p.rank.as_deref().unwrap_or("-")),
            t(&p.host),
            if peaks.is_empty() {
                "-".to_string()
            } else {
                peaks.join(", ")
            }
        );
    }
}

/// Every rank's peak at both layers, which peaked highest and which failed.
fn ranks_table(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "\n{:>5} {:>8} {:>14} {:>14} {:>7}",
        "rank", "pid", "peak reserved", "peak tensors", "failed"
    );
    for r in &s.ranks {
        let _ = writeln!(
            o,
            "{:>5} {:>8} {:>14} {:>14} {:>7}{}",
            t(&r.rank),
            r.pid,
            units::bytes(r.peak_reserved_bytes),
            r.peak_requested_bytes.map_or("-".into(), units::bytes),
            r.failed_allocations,
            if r.highest { "  <- highest peak" } else { "" }
        );
    }
}

/// Memory that is not device memory, a line per location, where the trace says more than
/// plain pinned host memory (the line above): host NUMA nodes, managed pools.
fn locations(o: &mut String, p: &ProcessSummary) {
    if p.memory_by_location.iter().all(|l| l.location == "host") {
        return;
    }
    for l in &p.memory_by_location {
        let label = match l.location {
            "host" => "  pinned host memory on the host",
            "host_numa" => "  pinned host memory on a host NUMA node",
            "host_numa_current" => "  pinned host memory on the caller's NUMA node",
            "managed" => "  managed pool memory (unified memory, not device memory)",
            other => other,
        };
        let _ = writeln!(
            o,
            "{label}: peak {}, {} at the end",
            units::bytes(l.peak_bytes),
            units::bytes(l.bytes_at_end)
        );
    }
}
