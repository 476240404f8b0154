//! A PyTorch snapshot as replay input: each device's trace entries as requests, and the
//! state at the trace's start rebuilt by undoing the trace, newest entry first, on the
//! snapshot's final segments (`allocator::start`).

use super::input::History;
use crate::allocator::settings::Settings;
use crate::allocator::start::{self, Fit};
use crate::snapshot::allocator_input::{self, end_state};
use crate::snapshot::{Action, DeviceSnapshot, Snapshot};

/// One history per device whose trace has allocator entries.
pub fn histories(snap: &Snapshot, settings: &Settings) -> Result<Vec<History>, String> {
    let mut out = Vec::new();
    for d in snap.devices.iter().filter(|d| !d.trace.is_empty()) {
        let h = history(d, settings).map_err(|e| format!("device {}: {e}", d.device))?;
        if !h.events.is_empty() {
            out.push(h);
        }
    }
    Ok(out)
}

fn history(d: &DeviceSnapshot, settings: &Settings) -> Result<History, String> {
    let mut h = History {
        device: d.device,
        settings: settings.clone(),
        ..Default::default()
    };
    h.private = allocator_input::private_segments(d);
    for (i, e) in d.trace.iter().enumerate() {
        let ev = allocator_input::event_of(i, &e.action, e.addr, e.size, e.stream, e.device_free)?;
        if let Some(ev) = ev {
            h.push(ev, i);
        }
    }
    let end = end_state(d)?;
    let newest_first = h
        .events
        .iter()
        .zip(&h.source_index)
        .rev()
        .map(|(e, &src)| Ok((src, e.clone())));
    h.start = start::rebuild(&end, settings, newest_first, Fit::Strict)?.segments;
    h.end = Some(end);
    Ok(h)
}

/// Expandable segments in use where the settings do not say so (snapshots before 2.4
/// record none): a `segment_map` or an expandable segment shows it.
pub fn infer_expandable(snap: &Snapshot, settings: &mut Settings) {
    let shown = snap.devices.iter().any(|d| {
        d.segments.iter().any(|s| s.is_expandable)
            || d.trace.iter().any(|e| e.action == Action::SegmentMap)
    });
    settings.expandable_segments |= shown;
}
