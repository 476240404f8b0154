//! `vramtrace snapshot [--json] FILE.pickle`: the figures of a PyTorch memory snapshot per
//! device (reserved, allocated, requested, fragmentation) and its out-of-memory entries.

use super::common;
use crate::render::escape::terminal;
use crate::snapshot::frames::{readable, Readable};
use crate::snapshot::read::read_snapshot_without_history_frames;
use crate::snapshot::{figures, timeline, DeviceSnapshot, Frame, Generation};
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
    if args.json {
        let devices: Vec<Value> = snap.devices.iter().map(device_json).collect();
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
        common::print(&text(&args.path, &snap))?;
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
    let mut v = readable(frames, crate::views::stacks::all_frames());
    v.truncate(FRAMES_SHOWN);
    v
}

fn frames_json(frames: &[Frame]) -> Value {
    shown(frames)
        .iter()
        .map(|f| json!({"filename": f.filename.unwrap_or(""), "line": f.line, "name": &*f.name}))
        .collect()
}

fn device_json(d: &DeviceSnapshot) -> Value {
    let f = figures(d);
    let t = timeline::timeline(d);
    let ooms: Vec<Value> = timeline::ooms_in(d, &t)
        .iter()
        .map(|o| {
            json!({
                "index": o.index, "time_us": o.time_us, "requested_bytes": o.requested,
                "stream": o.stream, "device_free_bytes": o.device_free,
                "reserved_bytes": o.reserved, "in_use_bytes": o.in_use,
                "frames": frames_json(&o.frames),
            })
        })
        .collect();
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
        "trace_start_reserved_bytes": t.start_reserved,
        "trace_start_in_use_bytes": t.start_in_use,
        "trace_consistent": t.consistent,
        "ooms": ooms,
    })
}

fn text(path: &std::path::Path, snap: &crate::snapshot::Snapshot) -> String {
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
        for o in timeline::ooms(d) {
            let free = o
                .device_free
                .map(|b| format!("; the driver had {} free", bytes(b)))
                .unwrap_or_default();
            let in_use = o
                .in_use
                .map(|b| format!(", {} in use", bytes(b)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  out of memory (entry {}): tried to allocate {} with {} reserved{in_use}{free}",
                o.index,
                bytes(o.requested),
                bytes(o.reserved)
            );
            if o.requested > f.largest_free && f.free >= o.requested {
                let _ = writeln!(
                    out,
                    "    at the snapshot the request was larger than the largest free block ({}) while {} was cached: \
                     fragmentation (try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or max_split_size_mb)",
                    bytes(f.largest_free),
                    bytes(f.free)
                );
            }
            for fr in shown(&o.frames) {
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
