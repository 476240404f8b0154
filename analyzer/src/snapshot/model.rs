//! What a PyTorch memory snapshot says, per device: the allocator's segments and blocks at
//! the moment of the snapshot, and the ring buffer of trace entries before it.

use std::sync::Arc;

/// A whole snapshot. `devices` holds every device with a segment or a trace entry, by ordinal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub devices: Vec<DeviceSnapshot>,
    /// `allocator_settings` (2.3+) as written (keys as text).
    pub allocator_settings: Option<serde_json::Map<String, serde_json::Value>>,
    /// Number of per-device trace lists (`len(device_traces)`): the devices the process saw.
    pub device_count: Option<usize>,
    pub generation: Generation,
    /// Pinned host memory (`host_segments`, `host_traces`; `record_pinned_host_memory`),
    /// in the shapes of device segments and trace entries. Not device memory: the views
    /// leave it out.
    pub host_segments: Vec<Segment>,
    pub host_traces: Vec<TraceEntry>,
    /// `external_annotations` (2.5+), as the memory_viz export writes them: the phases of
    /// the run it was made of. Not read from a file (`annotations.rs` streams them).
    pub external_annotations: Vec<Annotation>,
    /// The top-level keys that say the history was cut short (a true flag whose name says
    /// "truncated"), as the file names them; empty when it does not say so.
    pub history_truncated: Vec<String>,
}

/// One entry of `external_annotations`: a range `record_function` saw begin or end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    /// `true`: `"START"`; `false`: `"END"`.
    pub start: bool,
    pub name: String,
    pub device: i64,
    pub time_us: i64,
}

/// Which shape of the format the file had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Generation {
    /// The bare segment list of `torch.cuda.memory_snapshot()`.
    SegmentList,
    /// A `_dump_snapshot()` dict whose blocks carry `history` (2.0 era).
    History,
    /// A `_dump_snapshot()` dict with blocks that carry `address` and `frames` (2.1+).
    #[default]
    Dict,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceSnapshot {
    pub device: i64,
    pub segments: Vec<Segment>,
    pub trace: Vec<TraceEntry>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Segment {
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    /// `"large"` or `"small"` (the pool the segment belongs to).
    pub segment_type: String,
    pub is_expandable: bool,
    /// `segment_pool_id`: the private pool (CUDA graphs, `torch.cuda.MemPool`) the segment
    /// belongs to, `(0, 0)` for the default pools; `None` when the file does not say.
    pub segment_pool_id: Option<(i64, i64)>,
    pub frames: Frames,
    /// In address order, covering the segment.
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// As written, or (2.0-era files, which have none) the segment's address plus the sizes
    /// of the blocks before it: blocks tile their segment in address order.
    pub address: u64,
    pub size: u64,
    /// Bytes the caller asked for; `None` in files too old to say.
    pub requested_size: Option<u64>,
    pub state: BlockState,
    pub frames: Frames,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    ActiveAllocated,
    /// Freed by the program, waiting for streams that used it (`record_stream`).
    ActivePendingFree,
    Inactive,
}

impl BlockState {
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry {
    pub action: Action,
    /// Block or segment address; 0 for `snapshot` and `oom` entries.
    pub addr: u64,
    /// Block events: the requested size; segment events: the segment size; `oom`: the
    /// request that failed.
    pub size: u64,
    pub stream: u64,
    /// Epoch microseconds (2.2+).
    pub time_us: Option<i64>,
    /// `oom` entries: what the driver reported free.
    pub device_free: Option<u64>,
    pub frames: Frames,
    /// Every other key, as JSON: `user_metadata` (a string or a dict), `compile_context`,
    /// what an `annotate` entry carries, and keys newer than this reader.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for TraceEntry {
    fn default() -> Self {
        TraceEntry {
            action: Action::Snapshot,
            addr: 0,
            size: 0,
            stream: 0,
            time_us: None,
            device_free: None,
            frames: Frames::default(),
            extra: serde_json::Map::new(),
        }
    }
}

impl TraceEntry {
    /// `user_metadata` (2.9+): a string, or a dict of them.
    pub fn user_metadata(&self) -> Option<&serde_json::Value> {
        self.extra.get("user_metadata")
    }

    /// `compile_context` (torch.compile's, where it was recording).
    pub fn compile_context(&self) -> Option<&serde_json::Value> {
        self.extra.get("compile_context")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    /// An action this reader does not know, kept by name (`annotate`, from
    /// `_annotate_memory`, among them: its payload is in `TraceEntry::extra`).
    Other(String),
}

impl Action {
    pub fn name(&self) -> &str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Other(s) => s,
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            other => Action::Other(other.to_string()),
        }
    }
}

/// A frame list, shared by the blocks, segments and entries whose pickle names one list
/// (PyTorch's pickler writes each list once and refers to it after): a segment-heavy file
/// repeats each stack in thousands of blocks.
pub type Frames = Arc<[Frame]>;

/// A stack frame; the strings are shared between the many entries that repeat them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub filename: Arc<str>,
    pub line: i64,
    pub name: Arc<str>,
}

impl Snapshot {
    /// A snapshot built from a model of segments and trace entries, e.g. a vramtrace trace
    /// replayed into "what the allocator held": segments with their blocks (any device,
    /// any order) and per-device trace entries in time order. Devices come out sorted,
    /// segments by address; `write_memory_viz` writes the result for pytorch.org/memory_viz.
    pub fn from_segments(
        segments: impl IntoIterator<Item = (i64, Segment)>,
        traces: impl IntoIterator<Item = (i64, Vec<TraceEntry>)>,
    ) -> Snapshot {
        let mut s = Snapshot::default();
        for (device, seg) in segments {
            s.device_mut(device).segments.push(seg);
        }
        for (device, entries) in traces {
            s.device_mut(device).trace.extend(entries);
        }
        for d in &mut s.devices {
            d.segments.sort_by_key(|seg| seg.address);
        }
        s
    }

    /// The device's entry, created (in ordinal order) if missing.
    pub fn device_mut(&mut self, device: i64) -> &mut DeviceSnapshot {
        let i = match self.devices.binary_search_by_key(&device, |d| d.device) {
            Ok(i) => i,
            Err(i) => {
                self.devices.insert(
                    i,
                    DeviceSnapshot {
                        device,
                        ..Default::default()
                    },
                );
                i
            }
        };
        &mut self.devices[i]
    }

    pub fn device(&self, device: i64) -> Option<&DeviceSnapshot> {
        self.devices.iter().find(|d| d.device == device)
    }
}
