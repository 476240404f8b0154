//! The tables besides `events` and what was held at the end (`held.rs`), from the summary
//! view and the replay's stacks: a file per process in its rank's partition
//! (`processes`, `devices`, `failures`, `stacks`, `frames`), and one per run (`gpus`).

use super::Dataset;
use crate::model::ProcessModel;
use crate::pack::redact;
use crate::replay::DeviceId;
use crate::views::summary::Summary;
use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use std::sync::Arc;
use vramtrace_schema::StackTable;

/// A table's columns as they are added: (name, values, nullable).
#[derive(Default)]
pub(super) struct Columns(Vec<(&'static str, ArrayRef, bool)>);

impl Columns {
    pub(super) fn u64s(mut self, name: &'static str, v: Vec<u64>) -> Self {
        self.0.push((name, Arc::new(UInt64Array::from(v)), false));
        self
    }
    pub(super) fn opt_u64s(mut self, name: &'static str, v: Vec<Option<u64>>) -> Self {
        self.0.push((name, Arc::new(UInt64Array::from(v)), true));
        self
    }
    pub(super) fn u32s(mut self, name: &'static str, v: Vec<u32>) -> Self {
        self.0.push((name, Arc::new(UInt32Array::from(v)), false));
        self
    }
    pub(super) fn opt_u32s(mut self, name: &'static str, v: Vec<Option<u32>>) -> Self {
        self.0.push((name, Arc::new(UInt32Array::from(v)), true));
        self
    }
    pub(super) fn i32s(mut self, name: &'static str, v: Vec<i32>) -> Self {
        self.0.push((name, Arc::new(Int32Array::from(v)), false));
        self
    }
    pub(super) fn opt_i64s(mut self, name: &'static str, v: Vec<Option<i64>>) -> Self {
        self.0.push((name, Arc::new(Int64Array::from(v)), true));
        self
    }
    pub(super) fn bools(mut self, name: &'static str, v: Vec<bool>) -> Self {
        self.0.push((name, Arc::new(BooleanArray::from(v)), false));
        self
    }
    pub(super) fn texts(mut self, name: &'static str, v: Vec<Option<String>>) -> Self {
        // Nullable in every file alike: a dataset's files must agree on their schema.
        self.0.push((name, Arc::new(StringArray::from(v)), true));
        self
    }
    pub(super) fn batch(self) -> Result<RecordBatch, String> {
        RecordBatch::try_from_iter_with_nullable(self.0).map_err(|e| e.to_string())
    }
}

/// The `processes`, `devices`, `failures`, `stacks` and `frames` files of process `p`
/// (named `name`, in rank `rank`'s partition; `stacks`: the stacks its events name), and
/// returns the rows written.
pub fn write_tables(
    dataset: &Dataset,
    summary: &Summary,
    model: &ProcessModel,
    p: usize,
    rank: Option<&str>,
    name: &str,
    stacks: &[u64],
) -> Result<u64, String> {
    let s = &summary.processes[p];
    let host = || Some(s.host.clone());
    let mut rows = 0;
    let command = redact::command(&s.argv).join(" ");
    let process = Columns::default()
        .texts("host", vec![host()])
        .u32s("pid", vec![s.pid])
        .u32s("ppid", vec![s.ppid])
        .texts("local_rank", vec![s.env.get("LOCAL_RANK").cloned()])
        .texts("command", vec![Some(command)])
        .texts("exe", vec![Some(redact::base(&s.exe))])
        .u64s("start_unix_ns", vec![s.start_unix_ns])
        .bools("complete", vec![s.complete])
        .texts("error", vec![s.error.clone()])
        .u64s("events", vec![s.events])
        .u64s("allocations", vec![s.allocations])
        .u64s("frees", vec![s.frees])
        .u64s("failed_allocations", vec![s.failed_allocations])
        .u64s("unknown_frees", vec![s.unknown_frees])
        .u64s("calls_not_recorded", vec![s.calls_not_recorded])
        .u64s("leaked_blocks", vec![s.leaked_blocks])
        .u64s("leaked_bytes", vec![s.leaked_bytes])
        .u64s("peak_pinned_host_bytes", vec![s.peak_pinned_host_bytes]);
    write(dataset, "processes", rank, name, process, &mut rows)?;

    // Every table has its file, rows or none: a dataset without a failure still has the
    // `failures` table, so that a query over it reads no rows rather than failing.
    let d = &s.devices;
    {
        let devices = Columns::default()
            .texts("host", d.iter().map(|_| host()).collect())
            .u32s("pid", d.iter().map(|_| s.pid).collect())
            .i32s("device", d.iter().map(|d| d.device).collect())
            .texts("gpu", d.iter().map(|d| Some(d.gpu.clone())).collect())
            .u64s(
                "peak_reserved_bytes",
                d.iter().map(|d| d.peak_reserved_bytes).collect(),
            )
            .u64s("peak_time_ns", d.iter().map(|d| d.peak_time_ns).collect())
            .u64s(
                "reserved_bytes_at_end",
                d.iter().map(|d| d.reserved_bytes_at_end).collect(),
            )
            .opt_u64s(
                "peak_allocated_bytes",
                d.iter().map(|d| d.peak_allocated_bytes).collect(),
            )
            .opt_u64s(
                "peak_requested_bytes",
                d.iter().map(|d| d.peak_requested_bytes).collect(),
            )
            .opt_u64s(
                "allocated_bytes_at_end",
                d.iter().map(|d| d.allocated_bytes_at_end).collect(),
            )
            .opt_u64s(
                "requested_bytes_at_end",
                d.iter().map(|d| d.requested_bytes_at_end).collect(),
            )
            .opt_u64s(
                "peak_device_bytes",
                d.iter().map(|d| d.peak_device_bytes).collect(),
            )
            .opt_u64s(
                "cached_free_bytes_at_end",
                d.iter().map(|d| d.cached_free_bytes_at_end).collect(),
            )
            .opt_u64s(
                "largest_free_block_bytes_at_end",
                d.iter()
                    .map(|d| d.largest_free_block_bytes_at_end)
                    .collect(),
            );
        write(dataset, "devices", rank, name, devices, &mut rows)?;
    }

    let f = &s.failures;
    {
        let failures = Columns::default()
            .texts("host", f.iter().map(|_| host()).collect())
            .u32s("pid", f.iter().map(|_| s.pid).collect())
            .u64s("time_ns", f.iter().map(|f| f.time_ns).collect())
            .texts("api", f.iter().map(|f| Some(f.api.to_string())).collect())
            .i32s("device", f.iter().map(|f| f.device).collect())
            .u64s(
                "requested_bytes",
                f.iter().map(|f| f.requested_bytes).collect(),
            )
            .i32s("result", f.iter().map(|f| f.result).collect())
            .texts(
                "result_name",
                f.iter().map(|f| Some(f.result_name.clone())).collect(),
            )
            .u64s(
                "reserved_bytes",
                f.iter().map(|f| f.reserved_bytes).collect(),
            )
            .opt_u64s(
                "driver_free_bytes",
                f.iter().map(|f| f.driver_free_bytes).collect(),
            )
            .opt_u64s(
                "driver_total_bytes",
                f.iter().map(|f| f.driver_total_bytes).collect(),
            );
        write(dataset, "failures", rank, name, failures, &mut rows)?;
    }

    {
        let (stack_rows, frame_rows) = stack_tables(&model.stacks, stacks);
        let n = stack_rows.len();
        let stack_cols = Columns::default()
            .texts("host", vec![host(); n])
            .u32s("pid", vec![s.pid; n])
            .u64s("stack_id", stack_rows.iter().map(|r| r.0).collect())
            .u32s("depth", stack_rows.iter().map(|r| r.1).collect())
            .u64s("ip", stack_rows.iter().map(|r| r.2).collect());
        write(dataset, "stacks", rank, name, stack_cols, &mut rows)?;
        let n = frame_rows.len();
        {
            let frame_cols = Columns::default()
                .texts("host", vec![host(); n])
                .u32s("pid", vec![s.pid; n])
                .u64s("ip", frame_rows.iter().map(|r| r.ip).collect())
                .u32s("call", frame_rows.iter().map(|r| r.call).collect())
                .texts(
                    "function",
                    frame_rows.iter().map(|r| r.function.clone()).collect(),
                )
                .texts("file", frame_rows.iter().map(|r| r.file.clone()).collect())
                .opt_u32s("line", frame_rows.iter().map(|r| r.line).collect())
                .bools("inlined", frame_rows.iter().map(|r| r.inlined).collect())
                .texts(
                    "module",
                    frame_rows.iter().map(|r| Some(r.module.clone())).collect(),
                )
                .u64s("offset", frame_rows.iter().map(|r| r.offset).collect());
            write(dataset, "frames", rank, name, frame_cols, &mut rows)?;
        }
    }
    Ok(rows)
}

/// The run's physical GPUs, every process on each summed: the `gpus` table.
pub fn write_gpus(
    dataset: &Dataset,
    summary: &Summary,
    capacity: impl Fn(&DeviceId) -> Option<u64>,
) -> Result<u64, String> {
    let g = &summary.devices;
    let id = |d: &crate::views::summary::RunDeviceSummary| DeviceId {
        host: d.host.clone(),
        gpu: d.gpu.clone(),
    };
    let cols = Columns::default()
        .texts("host", g.iter().map(|d| Some(d.host.clone())).collect())
        .texts("gpu", g.iter().map(|d| Some(d.gpu.clone())).collect())
        .u32s("processes", g.iter().map(|d| d.pids.len() as u32).collect())
        .u64s(
            "peak_reserved_bytes",
            g.iter().map(|d| d.peak_reserved_bytes).collect(),
        )
        .u64s("peak_time_ns", g.iter().map(|d| d.peak_time_ns).collect())
        .u64s(
            "reserved_bytes_at_end",
            g.iter().map(|d| d.reserved_bytes_at_end).collect(),
        )
        .opt_u64s(
            "peak_requested_bytes",
            g.iter().map(|d| d.peak_requested_bytes).collect(),
        )
        .opt_u64s(
            "capacity_bytes",
            g.iter().map(|d| capacity(&id(d))).collect(),
        );
    let path = dataset.run_file("gpus")?;
    dataset.write(&path, &[cols.batch()?])?;
    Ok(g.len() as u64)
}

pub(super) fn write(
    dataset: &Dataset,
    table: &str,
    rank: Option<&str>,
    name: &str,
    cols: Columns,
    rows: &mut u64,
) -> Result<(), String> {
    let batch = cols.batch()?;
    *rows += batch.num_rows() as u64;
    let path = dataset.process_file(table, rank, name)?;
    dataset.write(&path, &[batch])
}

struct FrameRow {
    ip: u64,
    call: u32,
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    inlined: bool,
    module: String,
    offset: u64,
}

/// Each stack of `ids` as (stack id, depth from the innermost, return address) rows, and
/// each frame they reach once, a row per call (its inlined calls first, innermost first).
fn stack_tables(table: &StackTable, ids: &[u64]) -> (Vec<(u64, u32, u64)>, Vec<FrameRow>) {
    let mut stacks = Vec::new();
    let mut ips = Vec::new();
    for &id in ids {
        for (depth, ip) in table.ips(id).into_iter().enumerate() {
            stacks.push((id, depth as u32, ip));
            ips.push(ip);
        }
    }
    ips.sort_unstable();
    ips.dedup();
    let mut frames = Vec::new();
    for ip in ips {
        let Some(frame) = table.frame(ip) else {
            continue;
        };
        for (call, c) in frame.calls().enumerate() {
            frames.push(FrameRow {
                ip,
                call: call as u32,
                function: c.function.map(str::to_string),
                file: c.file.map(str::to_string),
                line: c.line,
                inlined: c.inlined,
                module: frame.module.clone(),
                offset: frame.offset,
            });
        }
    }
    (stacks, frames)
}
