//! What a replay yields: the figures, the failures, where it drifted from the recording,
//! the replayed entries, and the allocator's final state.

use crate::allocator::settings::Settings;
use crate::allocator::Allocator;

/// What answers the allocator's `cudaMalloc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// As in the recorded run: the recorded segment addresses, and failures where the
    /// recording shows them. The replay is checked against the recording.
    Recorded,
    /// A card on which the allocator may reserve this much (`None`: no limit).
    Card(Option<u64>),
}

/// An entry of the replayed run, as a snapshot trace entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub action: &'static str,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// The source entry it replays (segment events: the request they served).
    pub source: usize,
    /// An `oom` entry's: what the driver had free (the card's capacity less what the
    /// allocator held, or the recorded figure); `None` where neither is known.
    pub device_free: Option<u64>,
}

/// Where the replay first differed from the recording, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// Index of the source trace entry.
    pub entry: usize,
    pub message: String,
}

/// A request the replay could not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub entry: usize,
    pub requested: u64,
    pub stream: u64,
    pub reserved: u64,
    pub allocated: u64,
    pub largest_free: u64,
    /// The recorded run failed here too.
    pub recorded: bool,
}

/// Reserved and allocated bytes after a source entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub entry: usize,
    pub reserved: u64,
    pub allocated: u64,
}

#[derive(Debug)]
pub struct Outcome {
    pub settings: Settings,
    pub driver: Driver,
    /// Events replayed (all of them unless the run failed or drifted).
    pub replayed: usize,
    pub start_reserved: u64,
    pub peak_reserved: u64,
    pub peak_reserved_entry: Option<usize>,
    pub peak_allocated: u64,
    /// Reserved less allocated, at its largest.
    pub peak_unused: u64,
    /// About 100 samples, evenly spaced over the events.
    pub samples: Vec<Sample>,
    /// The failures, the recorded ones too; a request the recorded run served that fails
    /// here ends the replay (the program would have stopped).
    pub failures: Vec<Failure>,
    /// Requests that failed in the recorded run and were served here.
    pub recorded_failures_served: usize,
    pub drift: Option<Drift>,
    /// Where the replay stopped at a request the model does not replay (one in a private
    /// pool), and why.
    pub not_modelled: Option<Drift>,
    /// The replayed entries, when asked for.
    pub trace: Vec<Entry>,
    pub allocator: Allocator,
}

impl Outcome {
    /// The first failure of a request the recorded run served.
    pub fn new_failure(&self) -> Option<&Failure> {
        self.failures.iter().find(|f| !f.recorded)
    }

    /// Whether every request got memory (a replay stopped short does not say).
    pub fn fits(&self) -> bool {
        self.failures.is_empty() && self.not_modelled.is_none()
    }
}
