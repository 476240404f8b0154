//! The first lines of `summary`: the verdict, in the order of `report`'s first screen -
//! out of memory or not (and who held the memory at the failure), the peak and who held
//! it, leaks. Each figure says its layer and its moment: a process's memory when it ended
//! and a GPU's after its processes exited are different figures, and both are true.

use super::escape::terminal as t;
use crate::model::DriverSource;
use crate::replay::devices::gpu_label;
use crate::units::{self, bytes};
use crate::views::ending::{not_a_leak, Ending};
use crate::views::groups::Group;
use crate::views::summary::{FailureSummary, HighestPeak, ProcessSummary, Summary};
use std::fmt::Write;

/// Holders listed under the failure.
const HOLDERS: usize = 5;

pub fn lines(o: &mut String, s: &Summary) {
    let many_hosts = s
        .processes
        .iter()
        .any(|p| s.processes.first().is_some_and(|q| q.host != p.host));
    let failed: u64 = s.processes.iter().map(|p| p.failed_allocations).sum();
    let first = s
        .processes
        .iter()
        .flat_map(|p| p.failures.iter().map(move |f| (p, f)))
        .min_by_key(|(_, f)| f.time_ns);
    let leaks = leaks(s);
    // Without a failure, a leak is the news, as in `report`.
    if first.is_none() && leaks.leaked_bytes > 0 {
        let _ = writeln!(o, "{}", leaks.sentence());
    }
    if let Some((p, f)) = first {
        out_of_memory(o, p, f, failed, many_hosts);
    }
    peak(o, s, failed, first.is_some(), many_hosts);
    if first.is_some() || leaks.leaked_bytes == 0 {
        let _ = writeln!(o, "{}", leaks.sentence());
    }
}

fn out_of_memory(
    o: &mut String,
    p: &ProcessSummary,
    f: &FailureSummary,
    failed: u64,
    many_hosts: bool,
) {
    let who = crate::views::process_name::of_process(p);
    let rank = p
        .rank
        .as_ref()
        .map(|r| format!(" (rank {})", t(r)))
        .unwrap_or_default();
    let more = if failed > 1 {
        format!(
            " {} failed in all (`vramtrace oom` explains each).",
            units::count(failed, "allocation")
        )
    } else {
        String::new()
    };
    if let Some(l) = f.location {
        // Host or managed pool memory: no GPU ran out.
        let _ = writeln!(
            o,
            "{} {} of {} failed at {}, in {who}{rank}: {l} memory, not the device's.{more}",
            super::style::bad("Out of memory:"),
            f.api,
            bytes(f.requested_bytes),
            units::seconds(f.time_ns),
        );
        return;
    }
    let gpu = p
        .devices
        .iter()
        .find(|d| d.device == f.device)
        .map_or_else(|| f.device.to_string(), |d| d.gpu.clone());
    let _ = writeln!(
        o,
        "{} {} of {} failed on {} at {}, in {who}{rank}, which then held {} reserved there{}.{more}",
        super::style::bad("Out of memory:"),
        f.api,
        bytes(f.requested_bytes),
        t(&gpu_label(&p.host, &gpu, many_hosts)),
        units::seconds(f.time_ns),
        bytes(f.reserved_bytes),
        driver_said(f),
    );
    if f.held.is_empty() {
        return;
    }
    let layer = if f.held_unit == "tensor" {
        "its live tensors (allocated layer, requested bytes)"
    } else {
        "its device memory (reserved layer)"
    };
    let _ = writeln!(o, "  held at the failure, {layer}, by who allocated:");
    for g in f.held.iter().take(HOLDERS) {
        group_line(o, "  ", g, f.held_unit, "");
    }
    if let Some(split) = &f.split {
        let _ = writeln!(
            o,
            "  all of it then: {}",
            crate::views::device_split::line(split)
        );
    }
}

/// `; the driver reported right after it 1.4 GiB free of 24.0 GiB`: who said so, as `oom`
/// says it (the figure is the same by one rule), or nothing without a figure.
pub fn driver_said(f: &FailureSummary) -> String {
    let said = match f.driver_figure {
        Some(DriverSource::Probe) => "the driver reported right after it",
        Some(DriverSource::Pytorch) => "PyTorch saw at it",
        _ => "the driver last reported",
    };
    match (f.driver_free_bytes, f.driver_total_bytes) {
        (Some(free), Some(total)) => format!("; {said} {} free of {}", bytes(free), bytes(total)),
        (Some(free), None) => format!("; {said} {} free", bytes(free)),
        _ => String::new(),
    }
}

/// One group: bytes, count, who (and `who_suffix`, e.g. its pid), after `indent`.
pub fn group_line(o: &mut String, indent: &str, g: &Group, unit: &str, who_suffix: &str) {
    let _ = writeln!(
        o,
        "{indent}{:>12}  {:>14}  {}{who_suffix}",
        bytes(g.bytes),
        units::count(g.blocks, unit),
        t(&g.who())
    );
}

fn peak(o: &mut String, s: &Summary, failed: u64, oom: bool, many_hosts: bool) {
    let Some(HighestPeak {
        device: d,
        title: highest,
        tensors,
    }) = s.highest_peak()
    else {
        return;
    };
    let (groups, unit, of) = if d.layer == "allocated" {
        (&d.tensors_at_peak, "tensor", "of the tensors at their peak")
    } else {
        (&d.at_peak, "block", "of it")
    };
    let most = groups
        .first()
        .map(|g| {
            let pid = match (d.pids.len() > 1, g.pid) {
                (true, Some(pid)) => format!(" of pid {pid}"),
                _ => String::new(),
            };
            format!(
                "; the most {of}, {} in {}{pid}, from {}",
                bytes(g.bytes),
                units::count(g.blocks, unit),
                t(&g.who())
            )
        })
        .unwrap_or_default();
    let failures = match (oom, failed) {
        (true, _) => String::new(),
        (false, 0) => " No allocation failed.".into(),
        (false, n) => format!(" {} failed.", units::count(n, "allocation")),
    };
    let _ = writeln!(
        o,
        "{highest}: {} reserved on {} at {}{tensors}{most}.{failures}",
        bytes(d.peak_reserved_bytes),
        t(&gpu_label(&d.host, &d.gpu, many_hosts)),
        units::seconds(d.peak_time_ns),
    );
    if let Some(split) = d.split_at_peak(s) {
        let _ = writeln!(
            o,
            "  at the peak: {}",
            crate::views::device_split::line(split)
        );
    }
}

/// Memory still held when each process's trace ended, told apart as `report` does: a
/// leak where the process exited normally, else the state it died in.
#[derive(Default)]
struct Leaks {
    leaked_bytes: u64,
    /// Blocks never freed by processes that exited normally; their tensors instead where
    /// an allocator told them (its reserved segments are then its cache).
    leaked_blocks: Option<u64>,
    live_bytes: u64,
    endings: Vec<Ending>,
}

fn leaks(s: &Summary) -> Leaks {
    let mut out = Leaks {
        leaked_blocks: Some(0),
        ..Leaks::default()
    };
    for p in &s.processes {
        let ending = Ending::of_process(p);
        if ending != Ending::Exited {
            if p.leaked_bytes > 0 {
                out.live_bytes = out.live_bytes.saturating_add(p.leaked_bytes);
                if !out.endings.contains(&ending) {
                    out.endings.push(ending);
                }
            }
            continue;
        }
        let tensors: Option<u64> = p
            .devices
            .iter()
            .filter_map(|d| d.requested_bytes_at_end)
            .reduce(u64::saturating_add);
        match tensors {
            Some(b) => {
                out.leaked_bytes = out.leaked_bytes.saturating_add(b);
                // Tensors have no count in the summary: `leaks` has them.
                out.leaked_blocks = None;
            }
            None => {
                out.leaked_bytes = out.leaked_bytes.saturating_add(p.leaked_bytes);
                out.leaked_blocks = out.leaked_blocks.map(|n| n + p.leaked_blocks);
            }
        }
    }
    out
}

impl Leaks {
    fn sentence(&self) -> String {
        let leaked = match (self.leaked_bytes, self.leaked_blocks) {
            (0, _) => "Nothing leaked".to_string(),
            (b, Some(n)) => format!(
                "Leaked: {} in {} never freed by processes that exited normally (`vramtrace leaks` groups them)",
                bytes(b),
                units::count(n, "block")
            ),
            (b, None) => format!(
                "Leaked: {} never freed by processes that exited normally (`vramtrace leaks` groups them)",
                bytes(b)
            ),
        };
        let died = not_a_leak(self.live_bytes, &self.endings, "reserved");
        format!("{leaked}{died}.")
    }
}
