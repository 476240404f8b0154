//! PyTorch's own annotations in a snapshot (`external_annotations`, 2.5+): the ranges the
//! profiler's `record_function` saw while memory history was recorded (an optimizer's
//! `Optimizer.step#AdamW.step`, say), `{"stage": "START" | "END", "name", "device",
//! "time_us"}` each. They are the program's phases: markers `NAME` and `/NAME` at their
//! times, as a trace's are, drawn as bands and usable by `check --phase`.

use super::pickle::Pickle;
use crate::model::Map;
use std::collections::VecDeque;
use vramtrace_schema::{Api, Event};

/// Annotations read from one file at most; past them, a note says how many were left.
const MOST: usize = 100_000;
/// Bytes of the longest name read: a longer one is left out, not cut (two names cut alike
/// would pair, and `check --phase` could not name either).
const NAME_BYTES: usize = 4096;
/// Marker handles of a snapshot's annotations start here, clear of any other names.
const IDS: u64 = 1 << 60;

#[derive(Default)]
pub struct Annotations {
    /// Marker events in time order.
    events: VecDeque<Event>,
    /// The markers' names by handle.
    pub names: Map<u64, String>,
}

impl Annotations {
    /// The annotations of `p`, placed on the history's clock by `time` (microseconds since
    /// the epoch to the replay's nanoseconds); a note where some could not be read.
    pub fn read(p: &Pickle, time: impl Fn(i64) -> u64) -> (Annotations, Option<String>) {
        let mut out = Annotations::default();
        let Some(list) = p.get(p.root, "external_annotations") else {
            return (out, None);
        };
        let Some(items) = p.seq(list) else {
            return (
                out,
                Some("\"external_annotations\" is not a list: left out".into()),
            );
        };
        let mut ids: Map<String, u64> = Map::default();
        let mut unread = items.len().saturating_sub(MOST);
        for &a in items.iter().take(MOST) {
            let text = |key| p.get(a, key).and_then(|v| p.str(v));
            let int = |key| p.get(a, key).and_then(|v| p.int(v));
            let (Some(stage), Some(name), Some(device), Some(us)) =
                (text("stage"), text("name"), int("device"), int("time_us"))
            else {
                unread += 1;
                continue;
            };
            let (Ok(device), Ok(us)) = (i32::try_from(device), i64::try_from(us)) else {
                unread += 1;
                continue;
            };
            // A name that reads as a category range would relabel the tensors: the
            // annotation is PyTorch's, not the program's range.
            let range_like = name.starts_with(crate::model::RANGE_PREFIX);
            if name.len() > NAME_BYTES || range_like {
                unread += 1;
                continue;
            }
            let name = name.to_string();
            let name = match stage {
                "START" => name,
                "END" => format!("/{name}"),
                _ => {
                    unread += 1;
                    continue;
                }
            };
            let next = IDS + ids.len() as u64;
            let id = *ids.entry(name).or_insert(next);
            let mut e = Event::new(time(us), 0, device, Api::VramtraceMarker, 0);
            e.handle = Some(id);
            out.events.push_back(e);
        }
        // A stable sort: a START and END at one time keep their order.
        out.events.make_contiguous().sort_by_key(|e| e.t);
        out.names = ids.into_iter().map(|(name, id)| (id, name)).collect();
        let note = (unread > 0).then(|| {
            let entries = if unread == 1 { "entry" } else { "entries" };
            format!(
                "{unread} {entries} of \"external_annotations\" left out (not START/END entries with a name of at most {NAME_BYTES} bytes, not `category:...`, a device and time_us; or past the first {MOST})"
            )
        });
        (out, note)
    }

    /// The time of the next annotation.
    pub fn next_time(&self) -> Option<u64> {
        self.events.front().map(|e| e.t)
    }

    pub fn pop(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}
