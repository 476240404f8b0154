//! A PyTorch memory snapshot given where a trace is expected: `summary` and `oom` read it
//! alone (the figures a snapshot holds: segments, blocks, its out-of-memory entries).

use super::common;
use crate::snapshot::figures::figures;
use crate::snapshot::read::read_snapshot;
use crate::snapshot::timeline;
use crate::snapshot::Snapshot;
use crate::units;
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use vramtrace_schema::reader::compressed;

/// The one path, when it is a pickle (the protocol 2+ marker byte, or a pickle name).
pub fn single(paths: &[PathBuf]) -> Option<&Path> {
    let [path] = paths else {
        return None;
    };
    if !path.is_file() {
        return None;
    }
    let named = compressed::inner_name(path)
        .extension()
        .is_some_and(|e| e == "pickle" || e == "pkl");
    let mut first = [0u8; 1];
    let marked = compressed::open(path)
        .and_then(|mut f| f.read_exact(&mut first))
        .is_ok()
        && first[0] == 0x80;
    (named || marked).then_some(path.as_path())
}

fn load(path: &Path) -> Result<Snapshot, String> {
    read_snapshot(path)
}

/// `summary --json` of a snapshot: reserved, allocated and fragmentation at the moment it
/// was taken, per device; the peaks where the snapshot's trace covers them.
pub fn summary(path: &Path, as_json: bool) -> Result<i32, String> {
    let snap = load(path)?;
    let devices: Vec<Value> = snap
        .devices
        .iter()
        .map(|d| {
            let f = figures(d);
            let t = timeline::timeline(d);
            let peak_reserved = t
                .points
                .iter()
                .map(|p| p.reserved)
                .chain([f.reserved, t.start_reserved])
                .max();
            json!({
                "device": d.device,
                "peak_reserved_bytes": peak_reserved,
                "reserved_bytes_at_end": f.reserved,
                "peak_allocated_bytes": Value::Null,
                "allocated_bytes_at_end": f.allocated,
                "requested_bytes_at_end": f.requested,
                "peak_device_bytes": Value::Null,
                "largest_free_block_bytes_at_end": f.largest_free,
                "free_blocks_at_end": f.free_blocks,
                "cached_free_bytes_at_end": f.free,
                "segments": f.segments,
                "failed_allocations": timeline::ooms_in(d, &t).len(),
            })
        })
        .collect();
    if as_json {
        let doc = json!({
            "format": "vramtrace-summary", "version": 1,
            "source": "pytorch-snapshot", "path": path.display().to_string(),
            "processes": [{ "path": path.display().to_string(), "devices": devices }],
        });
        common::print(&crate::render::json(&doc))?;
    } else {
        let mut o = format!("{}: a PyTorch memory snapshot\n", path.display());
        for d in &devices {
            let b = |k: &str| units::bytes(d[k].as_u64().unwrap_or(0));
            o.push_str(&format!(
                "device {}: {} reserved, {} allocated, {} cached free (largest free block {}), {} failed allocations\n",
                d["device"],
                b("reserved_bytes_at_end"),
                b("allocated_bytes_at_end"),
                b("cached_free_bytes_at_end"),
                b("largest_free_block_bytes_at_end"),
                d["failed_allocations"]
            ));
        }
        common::print(&o)?;
    }
    Ok(0)
}

/// Why a request failed, from a snapshot's figures: fragmentation when the cache held
/// enough free bytes but no block that large; the model needing more when nearly all of
/// what was reserved was in use; otherwise memory outside the allocator.
fn verdict(
    requested: u64,
    reserved: u64,
    in_use: Option<u64>,
    largest_free: u64,
) -> (&'static str, String) {
    let cached = in_use.map(|u| reserved.saturating_sub(u));
    match cached {
        Some(c) if c >= requested && largest_free < requested => (
            "fragmentation",
            format!(
                "the request ({}) was larger than the largest free block ({}) while {} was cached: try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or max_split_size_mb",
                units::bytes(requested), units::bytes(largest_free), units::bytes(c)
            ),
        ),
        Some(c) if c < requested / 4 => (
            "needs_more_memory",
            format!(
                "reserved ({}) was nearly all in use ({} cached): the model really needs more memory: a smaller batch, activation checkpointing, mixed precision",
                units::bytes(reserved), units::bytes(c)
            ),
        ),
        _ => (
            "memory_outside_allocator",
            format!(
                "the allocator held {} but the device had no room: memory outside it (CUDA context, NCCL, other processes)",
                units::bytes(reserved)
            ),
        ),
    }
}

/// `oom` of a snapshot: each `oom` entry of its trace.
pub fn oom(path: &Path, as_json: bool) -> Result<i32, String> {
    let snap = load(path)?;
    let mut failures = Vec::new();
    let replays = super::whatif_oom::oom_replays(&snap);
    for d in &snap.devices {
        let f = figures(d);
        for o in timeline::ooms(d) {
            let (kind, words) = verdict(o.requested, o.reserved, o.in_use, f.largest_free);
            let avoided = replays.avoided_by(d.device, o.index, o.device_free);
            failures.push(json!({
                "device": d.device,
                "time_us": o.time_us,
                "requested_bytes": o.requested,
                "device_free_bytes": o.device_free,
                "reserved_bytes": o.reserved,
                "in_use_bytes": o.in_use,
                "largest_free_block_bytes": f.largest_free,
                "verdict": kind,
                "explanation": words,
                "avoided_by": avoided,
                "frames": o.frames.iter().take(12).map(|f| json!({"name": &*f.name, "filename": &*f.filename, "line": f.line})).collect::<Vec<_>>(),
            }));
        }
    }
    if as_json {
        let doc = json!({"format": "vramtrace-oom", "version": 1, "source": "pytorch-snapshot", "failures": failures});
        common::print(&crate::render::json(&doc))?;
    } else if failures.is_empty() {
        common::print(&format!(
            "{}: no out-of-memory entry in this snapshot\n",
            path.display()
        ))?;
    } else {
        let mut o = String::new();
        for f in &failures {
            o.push_str(&format!(
                "device {}: a request of {} failed; {}\n",
                f["device"],
                units::bytes(f["requested_bytes"].as_u64().unwrap_or(0)),
                f["explanation"].as_str().unwrap_or("")
            ));
            if let Some(line) = super::whatif_oom::avoided_line(&f["avoided_by"]) {
                o.push_str(&format!("  {line}\n"));
            }
        }
        common::print(&o)?;
    }
    Ok(0)
}
