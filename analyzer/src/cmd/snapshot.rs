//! `vramtrace snapshot [--json] FILE.pickle`: the figures of a PyTorch memory snapshot per
//! device (reserved, allocated, requested, fragmentation) and its out-of-memory entries.

use super::common;
use crate::render::escape::terminal;
use crate::snapshot::events::{SnapshotEvents, SnapshotFacts};
use crate::snapshot::frames::{readable, Readable};
use crate::snapshot::read::read_snapshot_without_history_frames;
use crate::snapshot::{figures, Action, DeviceSnapshot, Frame, Generation};
use crate::units::{self, bytes};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// A pickle from `torch.cuda.memory._dump_snapshot()`, a pickled
    /// `torch.cuda.memory_snapshot()` list, or one `vramtrace run` wrote.
    #[arg(value_name = "FILE.pickle")]
    pub path: PathBuf,
}

/// Frames shown per out-of-memory entry.
const FRAMES_SHOWN: usize = 12;

pub fn snapshot(args: SnapshotArgs) -> Result<i32, String> {
    // The history's frames are shown for its `oom` entries only.
    let snap = read_snapshot_without_history_frames(&args.path)?;
    for d in &snap.devices {
        for what in crate::snapshot::figures::impossible(d, &figures(d)) {
            eprintln!(
                "vramtrace: warning: {}: device {}: {what}",
                args.path.display(),
                d.device
            );
        }
    }
    // The history's figures are the allocator model's, as every view reads them.
    let facts = match SnapshotEvents::facts_of(&args.path) {
        Ok(f) => {
            for n in &f.notes {
                eprintln!("vramtrace: {n}");
            }
            f
        }
        Err(e) => {
            eprintln!("vramtrace: warning: {e}: its history's figures are left out");
            SnapshotFacts::default()
        }
    };
    if args.json {
        let devices: Vec<Value> = snap
            .devices
            .iter()
            .map(|d| device_json(d, &facts))
            .collect();
        let doc = json!({
            "format": "vramtrace-snapshot", "version": 1,
            "path": args.path.display().to_string(),
            "generation": generation_name(snap.generation),
            "device_count": snap.device_count,
            "allocator_settings": snap.allocator_settings,
            "devices": devices,
        });
        common::print(&crate::render::json(&doc))?;
    } else {
        common::print(&text(&args.path, &snap, &facts))?;
    }
    Ok(0)
}

fn generation_name(g: Generation) -> &'static str {
    match g {
        Generation::SegmentList => "segment_list",
        Generation::History => "history",
        Generation::Dict => "dict",
    }
}

/// The frames a person reads (`--all-frames`: every one), innermost first.
fn shown(frames: &[Frame]) -> Vec<Readable<'_>> {
    let mut v = readable(frames, crate::frame_options::all_frames());
    v.truncate(FRAMES_SHOWN);
    v
}

fn frames_json(frames: &[Frame]) -> Value {
    shown(frames)
        .iter()
        .map(|f| json!({"filename": f.filename.unwrap_or(""), "line": f.line, "name": &*f.name}))
        .collect()
}

/// One `oom` entry with the allocator model's state when it failed.
struct Oom<'a> {
    index: usize,
    entry: &'a crate::snapshot::TraceEntry,
    shape: Option<&'a crate::allocator::follow::Shape>,
}

/// The device's `oom` entries, each with the model's shape at it (the n-th shape of the
/// device is its n-th `oom` entry).
fn ooms<'a>(d: &'a DeviceSnapshot, facts: &'a SnapshotFacts) -> Vec<Oom<'a>> {
    let shapes = facts
        .failures
        .iter()
        .find(|(dev, _)| i64::from(*dev) == d.device)
        .map_or(&[][..], |(_, s)| &s[..]);
    let entries = d.trace.iter().enumerate();
    let entries = entries.filter(|(_, e)| e.action == Action::Oom);
    entries
        .enumerate()
        .map(|(k, (index, entry))| Oom {
            index,
            entry,
            shape: shapes.get(k),
        })
        .collect()
}

fn device_json(d: &DeviceSnapshot, facts: &SnapshotFacts) -> Value {
    let f = figures(d);
    let ooms: Vec<Value> = ooms(d, facts)
        .iter()
        .map(|o| {
            json!({
                "index": o.index, "time_us": o.entry.time_us, "requested_bytes": o.entry.size,
                "stream": o.entry.stream, "device_free_bytes": o.entry.device_free,
                "reserved_bytes": o.shape.map(|s| s.reserved),
                "allocated_bytes": o.shape.map(|s| s.allocated),
                "largest_free_block_bytes": o.shape.map(|s| s.largest_free),
                "frames": frames_json(&o.entry.frames),
            })
        })
        .collect();
    let window = facts
        .windows
        .iter()
        .find(|(dev, _)| i64::from(*dev) == d.device)
        .map(|(_, w)| *w);
    let misfit = facts
        .misfits
        .iter()
        .find(|(dev, _)| i64::from(*dev) == d.device)
        .map(|(_, entry)| *entry);
    json!({
        "device": d.device,
        "segments": f.segments, "blocks": f.blocks, "expandable_segments": f.expandable_segments,
        "reserved_bytes": f.reserved,
        "allocated_bytes": f.allocated,
        "requested_bytes": f.requested,
        "pending_free_bytes": f.pending_free,
        "free_bytes": f.free,
        "free_blocks": f.free_blocks,
        "largest_free_block_bytes": f.largest_free,
        "largest_free_small_block_bytes": f.largest_free_small,
        "largest_free_large_block_bytes": f.largest_free_large,
        "internal_fragmentation_bytes": f.internal,
        "external_fragmentation_ratio": f.external_ratio(),
        "trace_entries": d.trace.len(),
        "trace_first_time_us": d.trace.iter().find_map(|e| e.time_us),
        "trace_last_time_us": d.trace.iter().rev().find_map(|e| e.time_us),
        "trace_start_reserved_bytes": window.map(|w| w.reserved),
        "trace_start_allocated_bytes": window.map(|w| w.allocated),
        "trace_start_requested_bytes": window.map(|w| w.requested),
        "trace_consistent": misfit.is_none(),
        "trace_first_misfit_entry": misfit,
        "ooms": ooms,
    })
}

fn text(path: &std::path::Path, snap: &crate::snapshot::Snapshot, facts: &SnapshotFacts) -> String {
    let mut out = String::new();
    let kind = match snap.generation {
        Generation::SegmentList => "a memory_snapshot() segment list",
        Generation::History => "a _dump_snapshot() dict, blocks with history (2.0)",
        Generation::Dict => "a _dump_snapshot() dict",
    };
    let _ = writeln!(out, "{}: {kind}", path.display());
    if snap.devices.is_empty() {
        let _ = writeln!(out, "  no segments and no trace entries");
    }
    for d in &snap.devices {
        let f = figures(d);
        let _ = writeln!(
            out,
            "device {}: {}, {}",
            d.device,
            units::count(f.segments as u64, "segment"),
            units::count(f.blocks as u64, "block")
        );
        let _ = writeln!(out, "  reserved      {}", bytes(f.reserved));
        let requested = match (f.requested, f.internal) {
            (Some(r), Some(i)) => {
                format!(" (requested {}, {} lost to rounding)", bytes(r), bytes(i))
            }
            _ => String::new(),
        };
        let _ = writeln!(out, "  allocated     {}{requested}", bytes(f.allocated));
        if f.pending_free > 0 {
            let _ = writeln!(out, "  pending free  {}", bytes(f.pending_free));
        }
        let _ = writeln!(
            out,
            "  cached free   {} in {}, largest {} (small pool {}, large pool {})",
            bytes(f.free),
            units::count(f.free_blocks as u64, "block"),
            bytes(f.largest_free),
            bytes(f.largest_free_small),
            bytes(f.largest_free_large)
        );
        if !d.trace.is_empty() {
            let first = d.trace.iter().find_map(|e| e.time_us);
            let last = d.trace.iter().rev().find_map(|e| e.time_us);
            let span = match (first, last) {
                (Some(a), Some(b)) => format!(" over {:.3}s", (b - a) as f64 / 1e6),
                _ => String::new(),
            };
            let n = d.trace.len();
            let s = if n == 1 { "y" } else { "ies" };
            let _ = writeln!(out, "  trace         {n} entr{s}{span}");
        }
        for o in ooms(d, facts) {
            let free = o
                .entry
                .device_free
                .map(|b| format!("; the driver had {} free", bytes(b)))
                .unwrap_or_default();
            let held = match o.shape {
                Some(s) => format!(
                    " with {} reserved, {} allocated",
                    bytes(s.reserved),
                    bytes(s.allocated)
                ),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "  out of memory (entry {}): tried to allocate {}{held}{free}",
                o.index,
                bytes(o.entry.size)
            );
            if let Some(s) = o
                .shape
                .filter(|s| o.entry.size > s.largest_free && s.free_bytes >= o.entry.size)
            {
                // Expandable segments' free blocks lie in mapped pages; what was reserved
                // but unmapped is no memory, so it is not counted as cached.
                let try_this = match facts.expandable_segments {
                    true => "expandable_segments was on; try max_split_size_mb",
                    false => {
                        "try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or max_split_size_mb"
                    }
                };
                let _ = writeln!(
                    out,
                    "    the request was larger than the largest free block ({}) while {} was cached: fragmentation ({try_this})",
                    bytes(s.largest_free),
                    bytes(s.free_bytes)
                );
            }
            for fr in shown(&o.entry.frames) {
                match fr.filename {
                    Some(file) => {
                        let _ = writeln!(
                            out,
                            "    {} {}:{}",
                            terminal(&fr.name),
                            terminal(file),
                            fr.line
                        );
                    }
                    None => {
                        let _ = writeln!(out, "    {}", terminal(&fr.name));
                    }
                }
            }
        }
    }
    out
}
