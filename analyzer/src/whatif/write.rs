//! The replayed run as a snapshot: its trace (the input's requests with the replayed
//! addresses, the replayed segment events in their places) and its final segments, for
//! pytorch.org/memory_viz.

use super::replay::Outcome;
use crate::allocator::settings::Settings;
use crate::snapshot::{Action, Block, BlockState, DeviceSnapshot, Segment, Snapshot, TraceEntry};
use serde_json::{json, Map, Value};

/// A snapshot of the replays, one per device; `source`: the recorded device, whose entries
/// lend their frames and times to the replayed ones.
pub fn snapshot<'a>(
    replays: impl IntoIterator<Item = (&'a Outcome, &'a DeviceSnapshot)>,
    settings: &Settings,
) -> Snapshot {
    let mut snap = Snapshot {
        allocator_settings: Some(settings_json(settings)),
        ..Default::default()
    };
    for (o, source) in replays {
        let d = snap.device_mut(source.device);
        d.trace = o
            .trace
            .iter()
            .map(|e| {
                let from = source.trace.get(e.source);
                TraceEntry {
                    action: Action::parse(e.action),
                    addr: e.addr,
                    size: e.size,
                    stream: e.stream,
                    time_us: from.and_then(|f| f.time_us),
                    device_free: e.device_free,
                    extra: Default::default(),
                    // Segment events were not in the input: they get the request's frames.
                    frames: from.map(|f| f.frames.clone()).unwrap_or_default(),
                }
            })
            .collect();
        d.segments = o
            .allocator
            .segments()
            .into_iter()
            .map(|seg| Segment {
                address: seg.addr,
                total_size: seg.size,
                stream: seg.stream,
                segment_type: seg.pool.name().to_string(),
                is_expandable: seg.expandable,
                segment_pool_id: None,
                frames: Default::default(),
                blocks: seg
                    .blocks
                    .iter()
                    .map(|b| Block {
                        address: b.addr,
                        size: b.size,
                        requested_size: Some(if b.busy() { b.requested } else { 0 }),
                        state: if b.pending_free {
                            BlockState::ActivePendingFree
                        } else if b.allocated {
                            BlockState::ActiveAllocated
                        } else {
                            BlockState::Inactive
                        },
                        frames: Default::default(),
                    })
                    .collect(),
            })
            .collect();
    }
    snap
}

/// `allocator_settings` as PyTorch 2.4+ writes them.
pub fn settings_json(s: &Settings) -> Map<String, Value> {
    let divisions: Map<String, Value> = s
        .roundup_power2_divisions
        .iter()
        .enumerate()
        .map(|(i, &n)| ((1u64 << i).to_string(), json!(n)))
        .collect();
    let max_split: i64 = if s.max_split_size == u64::MAX {
        -1
    } else {
        s.max_split_size as i64
    };
    let conf = s.describe();
    let mut m = Map::new();
    m.insert(
        "PYTORCH_CUDA_ALLOC_CONF".into(),
        json!(if conf == "defaults" {
            String::new()
        } else {
            conf
        }),
    );
    m.insert("max_split_size".into(), json!(max_split));
    m.insert(
        "max_non_split_rounding_size".into(),
        json!(s.max_non_split_rounding),
    );
    m.insert(
        "garbage_collection_threshold".into(),
        json!(s.garbage_collection_threshold),
    );
    m.insert("expandable_segments".into(), json!(s.expandable_segments));
    m.insert("roundup_power2_divisions".into(), Value::Object(divisions));
    m
}
