//! What each process held when its replay ended, and what it marked: `segments` (device
//! memory from the driver), `tensors` (an allocator's blocks: PyTorch's tensors) and
//! `markers` and `phases`, a file per process in its rank's partition. For a PyTorch
//! snapshot the end is the moment it was taken: its own segments and blocks.

use super::tables::{write, Columns};
use super::Dataset;
use crate::model::ProcessModel;
use crate::views::categories::of_block_at_end;
use crate::views::marks::Marks;

/// Run time from a process's own clock (ns since its trace start).
fn run_time(origin: u64, t: u64) -> u64 {
    origin.saturating_add(t)
}

/// A stack id as the tables hold it: null where none was recorded.
fn stack_id(stack: u64) -> Option<u64> {
    (stack != 0).then_some(stack)
}

/// The `segments`, `tensors`, `markers` and `phases` files of process `p`; returns the
/// rows written.
pub fn write_held(
    dataset: &Dataset,
    model: &ProcessModel,
    p: usize,
    origin: u64,
    marks: &Marks,
    rank: Option<&str>,
    name: &str,
) -> Result<u64, String> {
    let host = || Some(model.header.host.clone());
    let pid = model.header.pid;
    let mut rows = 0;

    let mut segments: Vec<_> = model
        .live_blocks()
        .filter(|b| b.kind().is_device_memory() && b.off_device().is_none())
        .collect();
    segments.sort_by_key(|b| (b.dev, b.addr));
    let cols = Columns::default()
        .texts("host", segments.iter().map(|_| host()).collect())
        .u32s("pid", vec![pid; segments.len()])
        .i32s("device", segments.iter().map(|b| b.dev).collect())
        .u64s("address", segments.iter().map(|b| b.addr).collect())
        .u64s("size", segments.iter().map(|b| b.size).collect())
        .texts(
            "api",
            segments.iter().map(|b| Some(b.api.name().into())).collect(),
        )
        .texts(
            "kind",
            segments
                .iter()
                .map(|b| Some(b.kind().name().into()))
                .collect(),
        )
        .u64s(
            "time_ns",
            segments.iter().map(|b| run_time(origin, b.t)).collect(),
        )
        .opt_u64s(
            "stack_id",
            segments.iter().map(|b| stack_id(b.stack)).collect(),
        );
    write(dataset, "segments", rank, name, cols, &mut rows)?;

    let mut tensors: Vec<_> = model.layers.blocks().collect();
    tensors.sort_by_key(|(addr, b)| (b.dev, *addr));
    let cols = Columns::default()
        .texts("host", tensors.iter().map(|_| host()).collect())
        .u32s("pid", vec![pid; tensors.len()])
        .i32s("device", tensors.iter().map(|(_, b)| b.dev).collect())
        .u64s("address", tensors.iter().map(|(a, _)| *a).collect())
        .u64s("size", tensors.iter().map(|(_, b)| b.size).collect())
        .u64s(
            "requested_bytes",
            tensors.iter().map(|(_, b)| b.requested).collect(),
        )
        .u64s(
            "time_ns",
            tensors.iter().map(|(_, b)| run_time(origin, b.t)).collect(),
        )
        .opt_u64s(
            "stack_id",
            tensors.iter().map(|(_, b)| stack_id(b.key.stack)).collect(),
        )
        .texts(
            "category",
            tensors
                .iter()
                .map(|(addr, b)| of_block_at_end(model, *addr, b).map(|c| c.name().into()))
                .collect(),
        );
    let label = |b: &crate::model::layers::LiveBlock| model.categories.labels.get(&b.key.stack);
    let pool = |b| label(b).and_then(|l| l.pool);
    let cols = cols
        .texts(
            "user_metadata",
            tensors
                .iter()
                .map(|(_, b)| label(b)?.user_metadata.as_ref().map(|m| m.text()))
                .collect(),
        )
        .opt_i64s(
            "pool_owner",
            tensors.iter().map(|(_, b)| pool(b).map(|p| p.0)).collect(),
        )
        .opt_i64s(
            "pool_id",
            tensors.iter().map(|(_, b)| pool(b).map(|p| p.1)).collect(),
        )
        .texts(
            "annotations",
            tensors
                .iter()
                .map(|(_, b)| {
                    let notes = &label(b)?.annotations;
                    (!notes.is_empty()).then(|| serde_json::to_string(notes).ok())?
                })
                .collect(),
        );
    write(dataset, "tensors", rank, name, cols, &mut rows)?;

    let markers: Vec<_> = marks.markers.iter().filter(|m| m.process == p).collect();
    let cols = Columns::default()
        .texts("host", markers.iter().map(|_| host()).collect())
        .u32s("pid", vec![pid; markers.len()])
        .u64s("time_ns", markers.iter().map(|m| m.time_ns).collect())
        .texts(
            "name",
            markers.iter().map(|m| Some(m.name.clone())).collect(),
        );
    write(dataset, "markers", rank, name, cols, &mut rows)?;

    let phases: Vec<_> = marks.phases.iter().filter(|m| m.process == p).collect();
    let cols = Columns::default()
        .texts("host", phases.iter().map(|_| host()).collect())
        .u32s("pid", vec![pid; phases.len()])
        .texts(
            "name",
            phases.iter().map(|m| Some(m.name.clone())).collect(),
        )
        .u64s("start_ns", phases.iter().map(|m| m.start_ns).collect())
        .u64s("end_ns", phases.iter().map(|m| m.end_ns).collect());
    write(dataset, "phases", rank, name, cols, &mut rows)?;
    Ok(rows)
}
