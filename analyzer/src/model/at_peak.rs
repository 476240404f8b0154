//! What else was on a device at the moment its reserved layer peaked: the live tensors
//! (by who asked for them, so their categories can be read), and how much more than its
//! reserved bytes NVML said the process used (its CUDA context and the driver's own).
//! The reserved groups at that moment are the [`DeviceUsage`](super::DeviceUsage)'s.

use super::block::GroupKey;
use super::device::GroupBytes;
use super::layers::Change;
use super::Map;

/// Tensor changes kept since the last reserved peak before the tensors at it are taken, at
/// least: taking them costs a copy of every live group, so it is done once the peak has
/// stood for as many changes as there are live groups (or at the end), not at each peak -
/// PyTorch raises the reserved peak with every new segment, and a copy per segment cost
/// more than the replay. As many as the groups, the log costs what a copy of them would:
/// a fixed 4096 held 128 KiB in each of a directory's hundred small snapshots.
const CHANGES_KEPT: usize = 256;

#[derive(Clone, Debug, Default)]
pub struct AtReservedPeak {
    /// The live tensors at the peak, once taken.
    tensors: Map<GroupKey, GroupBytes>,
    /// The tensor changes since the peak, while not yet taken.
    since: Vec<Change>,
    pending: bool,
    /// When the peak was (ns since the trace start): changes at that time are part of it
    /// (a snapshot's state before its history is rebuilt at one time, segments first).
    peak_t: u64,
    /// NVML's last figure for the process and its reserved bytes then, and the same at the
    /// peak (else the first sample after it).
    last_sample: Option<(u64, u64)>,
    sample_at_peak: Option<(u64, u64)>,
    sample_after_peak: bool,
}

impl AtReservedPeak {
    /// The reserved layer peaked at time `t`: the live tensors at the end of that time
    /// are the ones at it.
    pub fn peaked(&mut self, t: u64) {
        self.since.clear();
        self.pending = true;
        self.peak_t = t;
        // The first sample from now on, else the last one before.
        self.sample_at_peak = self.last_sample;
        self.sample_after_peak = true;
    }

    /// What the last event, at time `t`, did to the live tensors of this device (`live`
    /// after it): every change of the event at once, since the tensors at the peak are
    /// the live ones with the changes since undone, all of them.
    pub fn tensors_changed<'a>(
        &mut self,
        t: u64,
        changes: impl Iterator<Item = &'a Change>,
        live: Option<&Map<GroupKey, GroupBytes>>,
    ) {
        if !self.pending || t <= self.peak_t {
            return;
        }
        self.since.extend(changes);
        let groups = live.map_or(0, |l| l.len());
        if self.since.len() >= CHANGES_KEPT.max(groups) {
            self.take(live);
        }
    }

    /// NVML's figure for the process, `used`, while it held `reserved`.
    pub fn sampled(&mut self, used: u64, reserved: u64) {
        self.last_sample = Some((used, reserved));
        if self.sample_after_peak {
            self.sample_at_peak = self.last_sample;
            self.sample_after_peak = false;
        }
    }

    /// Takes the tensors at the peak: the live ones with the changes since undone.
    pub fn take(&mut self, live: Option<&Map<GroupKey, GroupBytes>>) {
        if !self.pending {
            return;
        }
        let mut at = live.cloned().unwrap_or_default();
        for c in self.since.iter().rev() {
            let g = at.entry(c.key).or_default();
            if c.added {
                g.bytes = g.bytes.saturating_sub(c.bytes);
                g.blocks = g.blocks.saturating_sub(1);
            } else {
                g.bytes = g.bytes.saturating_add(c.bytes);
                g.blocks = g.blocks.saturating_add(1);
            }
        }
        at.retain(|_, g| g.blocks > 0);
        self.tensors = at;
        self.since = Vec::new();
        self.pending = false;
    }

    /// The live tensors at the peak (requested bytes); settled by [`AtReservedPeak::take`].
    pub fn tensors(&self) -> &Map<GroupKey, GroupBytes> {
        &self.tensors
    }

    /// How many bytes more than its reserved ones NVML said the process used, at the first
    /// sample from the peak on (else the last before it): its context and the driver's own.
    /// The difference is taken at one sample, so reserved memory freed since the peak does
    /// not count as context.
    pub fn beyond_reserved(&self) -> Option<u64> {
        self.sample_at_peak
            .map(|(used, reserved)| used.saturating_sub(reserved))
    }
}

impl AtReservedPeak {
    /// The same at NVML's last sample so far.
    pub fn beyond_reserved_now(&self) -> Option<u64> {
        self.last_sample
            .map(|(used, reserved)| used.saturating_sub(reserved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(stack: u64) -> GroupKey {
        GroupKey {
            api: vramtrace_schema::Api::VramtraceBlockAlloc,
            stack,
            category: None,
        }
    }

    fn change(stack: u64, bytes: u64, added: bool) -> Change {
        Change {
            dev: 0,
            key: key(stack),
            bytes,
            added,
        }
    }

    #[test]
    fn the_tensors_at_the_peak_are_the_live_ones_with_later_changes_undone() {
        let mut at = AtReservedPeak::default();
        let mut live: Map<GroupKey, GroupBytes> = Map::default();
        live.insert(
            key(1),
            GroupBytes {
                bytes: 100,
                blocks: 1,
            },
        );
        at.peaked(10);
        // At the peak's time: a tensor of stack 3 is part of it.
        live.insert(
            key(3),
            GroupBytes {
                bytes: 7,
                blocks: 1,
            },
        );
        at.tensors_changed(10, [change(3, 7, true)].iter(), Some(&live));
        // After the peak: stack 1's tensor is freed, stack 2 allocates two.
        live.remove(&key(1));
        at.tensors_changed(11, [change(1, 100, false)].iter(), Some(&live));
        live.insert(
            key(2),
            GroupBytes {
                bytes: 50,
                blocks: 2,
            },
        );
        at.tensors_changed(12, [change(2, 20, true)].iter(), Some(&live));
        at.tensors_changed(12, [change(2, 30, true)].iter(), Some(&live));
        at.take(Some(&live));
        let mut expected: Map<GroupKey, GroupBytes> = Map::default();
        expected.insert(
            key(1),
            GroupBytes {
                bytes: 100,
                blocks: 1,
            },
        );
        expected.insert(
            key(3),
            GroupBytes {
                bytes: 7,
                blocks: 1,
            },
        );
        assert_eq!(at.tensors(), &expected);
    }

    #[test]
    fn an_event_of_two_changes_is_undone_whole_where_it_fills_the_log() {
        // An address handed out again: its old block's removal and the new one's addition
        // in one event, the removal the last change the log keeps.
        let mut at = AtReservedPeak::default();
        let mut live: Map<GroupKey, GroupBytes> = Map::default();
        at.peaked(0);
        for i in 0..CHANGES_KEPT as u64 - 2 {
            at.tensors_changed(i + 1, [change(100, 1, i % 2 == 0)].iter(), Some(&live));
        }
        live.insert(
            key(1),
            GroupBytes {
                bytes: 8,
                blocks: 1,
            },
        );
        at.tensors_changed(10_000, [change(1, 8, true)].iter(), Some(&live));
        live.remove(&key(1));
        live.insert(
            key(2),
            GroupBytes {
                bytes: 150,
                blocks: 1,
            },
        );
        let event = [change(1, 8, false), change(2, 150, true)];
        at.tensors_changed(10_001, event.iter(), Some(&live));
        at.take(Some(&live));
        assert!(at.tensors().is_empty(), "{:?}", at.tensors());
    }

    #[test]
    fn many_changes_after_a_peak_take_it_once() {
        let mut at = AtReservedPeak::default();
        let mut live: Map<GroupKey, GroupBytes> = Map::default();
        at.peaked(0);
        for i in 0..CHANGES_KEPT as u64 * 3 {
            live.insert(
                key(i),
                GroupBytes {
                    bytes: 1,
                    blocks: 1,
                },
            );
            at.tensors_changed(i + 1, [change(i, 1, true)].iter(), Some(&live));
        }
        assert!(at.tensors().is_empty());
        assert!(at.since.is_empty() && !at.pending);
    }
}
