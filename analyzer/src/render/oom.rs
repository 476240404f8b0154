//! `oom` as text: each failure in plain words with the numbers.

use super::escape::terminal as t;
use crate::units::{self, bytes};
use crate::views::oom::{OomView, Postmortem};
use crate::views::stacks;
use serde_json::{json, Value};
use std::fmt::Write;

/// Groups listed per failure.
const TOP_GROUPS: usize = 8;

pub fn text(v: &OomView) -> String {
    let mut o = String::new();
    if v.failures.is_empty() {
        let _ = writeln!(o, "no failed allocations");
    }
    for (n, f) in v.failures.iter().enumerate() {
        let rank = f
            .rank
            .as_ref()
            .map(|r| format!(" (rank {})", t(r)))
            .unwrap_or_default();
        let _ = writeln!(o, "failure {} of {}", n + 1, v.failures.len());
        // Host or managed pool memory is asked for while a device is current, not on it.
        let place = match f.location {
            Some(l) => format!(
                "of {l} memory, not device memory (device {} current)",
                f.device
            ),
            None => format!("on device {} (GPU {})", f.device, t(&f.gpu)),
        };
        let _ = writeln!(
            o,
            "  At {}, process {}{rank} asked {} for {} ({} bytes) {place} and got {}.",
            units::when(v.start_unix_ns, f.time_ns),
            f.pid,
            f.api,
            bytes(f.requested_bytes),
            f.requested_bytes,
            f.result_name
        );
        if !f.frames.is_empty() {
            let _ = writeln!(
                o,
                "  Asked from{}",
                t(&stacks::inline(&f.frames).replacen(" <-", "", 1))
            );
        }
        if f.layer == "allocated" {
            tensors(&mut o, f);
            if f.both_layers {
                reserved(&mut o, f);
            }
        } else {
            reserved(&mut o, f);
            if f.both_layers {
                tensors(&mut o, f);
            }
        }
        if let Some(used) = f.device_bytes {
            let _ = writeln!(
                o,
                "  NVML's last sample before it showed the process using {} on the device (device layer: CUDA context included).",
                bytes(used)
            );
        }
        if !f.other_processes.is_empty() {
            let others: Vec<String> = f
                .other_processes
                .iter()
                .map(|p| format!("pid {} {}", p.pid, bytes(p.bytes)))
                .collect();
            let _ = writeln!(
                o,
                "  Other traced processes held {} on the same GPU: {}.",
                bytes(f.other_processes_bytes),
                others.join(", ")
            );
        }
        match (
            f.driver_free_bytes,
            f.driver_total_bytes,
            f.driver_report_time_ns,
        ) {
            (Some(free), Some(total), Some(_))
                if f.driver_figure == Some(crate::model::DriverSource::Pytorch) =>
            {
                let _ = writeln!(
                    o,
                    "  At the failure PyTorch's out-of-memory observer saw {} free of {} (the device, or the process's limit); {} of it was used by memory vramtrace does not see; by the figures {} was free.",
                    bytes(free),
                    bytes(total),
                    bytes(f.untraced_bytes.unwrap_or(0)),
                    bytes(f.estimated_free_bytes.unwrap_or(0))
                );
            }
            (Some(free), Some(total), Some(t)) => {
                let _ = writeln!(
                    o,
                    "  The driver last reported {} free of {} (at {}); {} of it was used by memory vramtrace does not see; by the figures {} was free at the failure.",
                    bytes(free),
                    bytes(total),
                    units::seconds(t),
                    bytes(f.untraced_bytes.unwrap_or(0)),
                    bytes(f.estimated_free_bytes.unwrap_or(0))
                );
            }
            (Some(free), None, _) => {
                let _ = writeln!(
                    o,
                    "  The driver had {} free at the failure (it did not say of how much).",
                    bytes(free)
                );
            }
            _ => {
                let _ = writeln!(
                    o,
                    "  The program never asked the driver how much memory was free."
                );
            }
        }
        let _ = writeln!(o, "  {}", t(&f.explanation));
        let _ = writeln!(o, "  What to try:");
        for a in &f.advice {
            let _ = writeln!(o, "    - {}", t(a));
        }
        if let Some(line) = f.avoided_by.as_ref().and_then(avoided_line) {
            let _ = writeln!(o, "  {}", t(&line));
        }
        let _ = writeln!(o);
    }
    o
}

/// What the process held at the failure in the reserved layer, by group.
fn reserved(o: &mut String, f: &Postmortem) {
    let _ = writeln!(
        o,
        "  It held {} of device memory (reserved layer) in {} there (its peak so far: {}):",
        bytes(f.live_bytes),
        units::count(f.live_blocks, "block"),
        bytes(f.peak_before_bytes)
    );
    if let Some(c) = &f.reserved_categories {
        let _ = writeln!(
            o,
            "    by what it was for (named by the program's category ranges): {}",
            crate::views::categories::reserved_words(c)
        );
    }
    if let Some(split) = &f.split {
        let _ = writeln!(
            o,
            "    all of it: {}",
            crate::views::device_split::line(split)
        );
    }
    for g in f.live_groups.iter().take(TOP_GROUPS) {
        let _ = writeln!(
            o,
            "    {:>12}  {:>13}  {}",
            bytes(g.bytes),
            units::count(g.blocks, "block"),
            t(&g.who())
        );
    }
    let shown = f.live_groups.len().min(TOP_GROUPS) as u64;
    if f.live_group_count > shown {
        let _ = writeln!(o, "    ... {} more groups", f.live_group_count - shown);
    }
}

/// The live tensors at the failure (the allocated layer), by who asked.
fn tensors(o: &mut String, f: &Postmortem) {
    if let Some(in_use) = f.tensor_bytes {
        let allocated = f
            .allocator
            .map(|a| format!(" ({} in blocks)", bytes(a.allocated_bytes)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  Its live tensors (allocated layer) asked for {}{allocated} in {}:",
            bytes(in_use),
            units::count(f.tensor_groups.iter().map(|g| g.blocks).sum(), "tensor")
        );
        if let Some(c) = &f.tensor_categories {
            let _ = writeln!(
                o,
                "    by what they were for ({}): {}",
                crate::views::categories::how(c),
                crate::views::categories::words(c)
            );
        }
        for g in f.tensor_groups.iter().take(TOP_GROUPS) {
            let _ = writeln!(
                o,
                "    {:>12}  {:>14}  {}",
                bytes(g.bytes),
                units::count(g.blocks, "tensor"),
                if g.frames.is_empty() {
                    "(no stack: allocated before the history began, or not recorded)".into()
                } else {
                    t(&stacks::inline(&g.frames).replacen(" <- ", "", 1)).into_owned()
                }
            );
        }
        if f.tensor_groups.len() > TOP_GROUPS {
            let _ = writeln!(
                o,
                "    ... {} more groups",
                f.tensor_groups.len() - TOP_GROUPS
            );
        }
    }
}

/// The post-mortem's line for an `avoided_by` value.
pub fn avoided_line(v: &Value) -> Option<String> {
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return Some(format!("by replay: not replayed ({e})"));
    }
    let cap = bytes(v.get("capacity_bytes")?.as_u64()?);
    if v["reproduced"] != json!(true) {
        return Some(format!(
            "by replay: the model on {cap} (reserved plus the driver's free bytes) does not fail here, so it gives no verdict"
        ));
    }
    let words: Vec<String> = v["settings"]
        .as_array()?
        .iter()
        .map(|s| {
            let would = match s["avoids"].as_bool() {
                Some(true) => "would have avoided it",
                Some(false) => "would not",
                None => "not replayed",
            };
            format!("{} {would}", s["settings"].as_str().unwrap_or(""))
        })
        .collect();
    let already: Vec<&str> = v["already_set"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let already = match already.is_empty() {
        true => String::new(),
        false => format!(" ({} already set when it failed)", already.join(", ")),
    };
    Some(format!("by replay on {cap}: {}{already}", words.join("; ")))
}
