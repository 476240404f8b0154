//! `vramtrace summary [--json] TRACE|DIR...`: one screen per run.

use crate::model::{DeviceUsage, ProcessModel};
use crate::run::Run;
use crate::{errors, units};
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SummaryArgs {
    /// Print JSON (keys documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Trace files or directories of traces.
    #[arg(required = true, value_name = "TRACE|DIR")]
    pub paths: Vec<PathBuf>,
}

/// Groups shown per device in the text view.
const TOP_GROUPS: usize = 5;

pub fn summary(args: SummaryArgs) -> Result<i32, String> {
    let run = Run::load(&args.paths, |_, _, _| {})?;
    for p in run.problems() {
        eprintln!("vramtrace: {p}");
    }
    if run.processes.is_empty() {
        return Err("no readable trace".into());
    }
    if args.json {
        let out = to_json(&run);
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", to_text(&run));
    }
    Ok(
        if run.unreadable.is_empty() && run.processes.iter().all(|p| p.error.is_none()) {
            0
        } else {
            1
        },
    )
}

fn leaked(p: &ProcessModel) -> (u64, u64) {
    p.live_blocks()
        .filter(|b| b.kind().is_device_memory())
        .fold((0, 0), |(n, bytes), b| (n + 1, bytes + b.size))
}

fn top_groups(d: &DeviceUsage) -> Vec<(String, u64, u64)> {
    let mut groups: Vec<_> = d
        .peak_groups
        .iter()
        .map(|(k, g)| (k.api.name().to_string(), g.bytes, g.blocks))
        .collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    groups
}

pub fn to_json(run: &Run) -> Value {
    let processes: Vec<Value> = run
        .processes
        .iter()
        .map(|p| {
            let (leaked_blocks, leaked_bytes) = leaked(p);
            let devices: Vec<Value> = p
                .devices
                .values()
                .map(|d| {
                    json!({
                        "device": d.device,
                        "peak_reserved_bytes": d.peak_reserved,
                        "peak_time_ns": run.run_time(p, d.peak_t),
                        "reserved_bytes_at_end": d.reserved,
                        "at_peak": top_groups(d).into_iter().map(|(api, bytes, blocks)| json!({
                            "api": api, "bytes": bytes, "blocks": blocks
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let failed: Vec<Value> = p
                .failures
                .iter()
                .map(|f| {
                    json!({
                        "time_ns": run.run_time(p, f.event.t),
                        "api": f.event.api.name(),
                        "device": f.event.dev,
                        "requested_bytes": f.requested,
                        "result": f.event.res,
                        "result_name": errors::name(f.event.api, f.event.res),
                        "reserved_bytes": f.reserved_on_device,
                        "driver_free_bytes": f.last_meminfo.map(|m| m.0),
                        "driver_total_bytes": f.last_meminfo.map(|m| m.1),
                    })
                })
                .collect();
            json!({
                "pid": p.header.pid,
                "ppid": p.header.ppid,
                "host": p.header.host,
                "rank": p.rank(),
                "argv": p.header.argv,
                "path": p.path,
                "start_unix_ns": p.header.start_unix_ns,
                "complete": p.ended(),
                "truncated": p.notes.truncated_line.is_some(),
                "error": p.error.as_ref().map(|e| e.to_string()),
                "events": p.counts.events,
                "allocations": p.counts.allocations,
                "frees": p.counts.frees,
                "failed_allocations": p.counts.failed_allocations,
                "unknown_frees": p.counts.unknown_frees,
                "leaked_blocks": leaked_blocks,
                "leaked_bytes": leaked_bytes,
                "peak_pinned_host_bytes": p.peak_pinned_host,
                "devices": devices,
                "failures": failed,
            })
        })
        .collect();
    json!({
        "format": "vramtrace-summary",
        "version": 1,
        "processes": processes,
        "unreadable": run.unreadable.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    })
}

pub fn to_text(run: &Run) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for p in &run.processes {
        let cmd = p.header.argv.join(" ");
        let rank = p.rank().map(|r| format!(", rank {r}")).unwrap_or_default();
        let state = if p.ended() {
            ""
        } else {
            " (trace cut: the process did not exit normally)"
        };
        let _ = writeln!(
            s,
            "process {} on {}{rank}: {cmd}{state}",
            p.header.pid, p.header.host
        );
        let (leaked_blocks, leaked_bytes) = leaked(p);
        let _ = writeln!(
            s,
            "  {} events: {} allocations, {} frees, {} failed allocations; {} blocks ({}) never freed",
            p.counts.events,
            p.counts.allocations,
            p.counts.frees,
            p.counts.failed_allocations,
            leaked_blocks,
            units::bytes(leaked_bytes)
        );
        for d in p.devices.values() {
            let _ = writeln!(
                s,
                "  device {}: peak {} reserved at {}, {} at the end",
                d.device,
                units::bytes(d.peak_reserved),
                units::seconds(run.run_time(p, d.peak_t)),
                units::bytes(d.reserved)
            );
            for (api, bytes, blocks) in top_groups(d).into_iter().take(TOP_GROUPS) {
                let _ = writeln!(
                    s,
                    "    {:>12}  {blocks:>6} blocks  {api}",
                    units::bytes(bytes)
                );
            }
        }
        if p.peak_pinned_host > 0 {
            let _ = writeln!(
                s,
                "  pinned host memory: peak {}",
                units::bytes(p.peak_pinned_host)
            );
        }
        for f in &p.failures {
            let driver = f
                .last_meminfo
                .map(|(free, total)| {
                    format!(
                        "; the driver last reported {} free of {}",
                        units::bytes(free),
                        units::bytes(total)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  FAILED at {}: {} of {} on device {} -> {}; this process held {}{driver}",
                units::seconds(run.run_time(p, f.event.t)),
                f.event.api.name(),
                units::bytes(f.requested),
                f.event.dev,
                errors::name(f.event.api, f.event.res),
                units::bytes(f.reserved_on_device)
            );
        }
    }
    s
}
