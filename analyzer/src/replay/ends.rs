//! When a process's memory leaves the run's totals.
//!
//! The driver takes back what a process held when the process ends: at `exit`, `_exit`,
//! `exec` (the new image starts with nothing) or a fatal signal, each of which writes an
//! end record. So three jobs that ran one after another on a card, or an exec chain, are
//! never summed as if they had run at once. A killed process writes no end record: its
//! memory stays in the totals until, at the latest, a process that started after its
//! last event takes the same device.

use super::{Run, Step};
use vramtrace_schema::Event;

/// What a queued item of the merge is, in the order they go at one moment: a trace not
/// yet read (queued at its start, so that a run of traces that ran one after another reads
/// one at a time), an event, a process's end.
pub const START: u8 = 0;
pub const EVENT: u8 = 1;
pub const END: u8 = 2;

#[derive(Default)]
pub struct Ends {
    /// Each process's last event, once its trace has run out: the step that gives its
    /// memory back points at it.
    last: Vec<Option<Event>>,
    /// Processes whose trace was cut (no end record), with the run time of their last
    /// event.
    cut: Vec<(usize, u64)>,
}

impl Ends {
    /// Process `i` has no more events; `last` was its last, at run time `time`, and `end`
    /// the time of its end record (its own clock), if it has one. Returns when its memory
    /// leaves the run: at its end record, or at its last event if that came later
    /// (another thread's teardown). A cut trace's process is remembered instead.
    pub fn ran_out(
        &mut self,
        run: &Run,
        i: usize,
        last: Event,
        time: u64,
        end: Option<u64>,
    ) -> Option<u64> {
        if self.last.len() <= i {
            self.last.resize(i + 1, None);
        }
        self.last[i] = Some(last);
        match end {
            Some(t) => Some(run.time_of(i, t).max(time)),
            None => {
                self.cut.push((i, time));
                None
            }
        }
    }

    /// Gives back from the run's totals what process `i` still holds (on run device
    /// `only`, or everywhere), at run time `time`, as a step of its own.
    pub fn release(
        &mut self,
        run: &mut Run,
        i: usize,
        only: Option<usize>,
        time: u64,
        each: &mut impl FnMut(&Step),
    ) {
        let Some(event) = self.last.get(i).copied().flatten() else {
            return;
        };
        // Its tensors leave the run's allocated layer too, on the same GPU (the run's
        // tensor devices are indexed apart).
        let tensors_only = only.map(|o| {
            let id = &run.devices.devices[o].0;
            run.tensors.devices.iter().position(|(t, _)| t == id)
        });
        if tensors_only != Some(None) {
            let own = &run.processes[i].layers.tensors;
            run.tensors.release(i, own, tensors_only.flatten());
        }
        let changes = run.devices.release(i, &run.processes[i].devices, only);
        if changes.is_empty() {
            return;
        }
        each(&Step {
            process: i,
            event: &event,
            time,
            model: &run.processes[i],
            changes: &changes,
            devices: &run.devices,
            tensors: &run.tensors,
            ended: true,
        });
    }

    /// Process `i` has just applied an event at run time `time`. On a device it takes
    /// for the first time, the cut processes whose last event came before `i` started
    /// are over: their memory is given back first.
    pub fn starting(&mut self, run: &mut Run, i: usize, time: u64, each: &mut impl FnMut(&Step)) {
        if self.cut.is_empty() {
            return;
        }
        let start = run.origins[i];
        let firsts: Vec<i32> = run.processes[i]
            .changes()
            .iter()
            .filter(|c| c.added && run.devices.lookup(i, c.dev).is_none())
            .map(|c| c.dev)
            .collect();
        for dev in firsts {
            let device = run.devices.index_of(i, &run.processes[i].header, dev);
            for n in 0..self.cut.len() {
                let (k, last) = self.cut[n];
                if k != i && last < start {
                    self.release(run, k, Some(device), time, each);
                }
            }
        }
    }
}
