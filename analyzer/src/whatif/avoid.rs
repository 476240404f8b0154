//! Which of the common settings would have avoided a recorded out-of-memory error: the
//! history replayed on the card the recorded run had (the bytes it reserved when the
//! request failed plus what the driver then reported free), first under the recorded
//! settings, which must fail there too, then under each alternative.

use super::input::{Event, History};
use super::replay::{replay, Driver};

/// Settings tried, in `PYTORCH_CUDA_ALLOC_CONF`'s words.
pub const COMMON: [&str; 4] = [
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
];

/// The verdict for one recorded failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Avoidance {
    /// The capacity replayed: reserved at the failure plus the driver's free bytes.
    pub capacity: u64,
    /// Whether the recorded settings fail there too on that card; if not, no verdict.
    pub reproduced: bool,
    /// Each setting of [`COMMON`], and whether the request got memory under it with no
    /// failure before it; or why it could not be replayed (a combination not modelled).
    pub settings: Vec<(&'static str, Result<bool, String>)>,
    /// Settings of [`COMMON`] the recorded settings already hold: not tried, since the
    /// failure happened under them.
    pub already_set: Vec<&'static str>,
}

/// The card the recorded run had, as the first recorded failure shows it: the bytes the
/// replay holds reserved when that request fails plus what the driver reported free;
/// with the failure's source index. `None` without a failure that says what was free.
pub fn recorded_card(h: &History) -> Result<Option<(u64, usize)>, String> {
    let Some(i) = h.events.iter().position(|e| {
        matches!(
            e,
            Event::Oom {
                device_free: Some(_),
                ..
            }
        )
    }) else {
        return Ok(None);
    };
    card_at(h, i)
}

/// The card at the `oom` event `i`.
fn card_at(h: &History, i: usize) -> Result<Option<(u64, usize)>, String> {
    let Event::Oom {
        device_free: Some(free),
        ..
    } = h.events[i]
    else {
        return Ok(None);
    };
    let entry = h.source_index[i];
    let recorded = replay(h, &h.settings, Driver::Recorded, false)?;
    if let Some(stop) = recorded.not_modelled.filter(|d| d.entry <= entry) {
        return Err(stop.message);
    }
    Ok(recorded
        .failures
        .iter()
        .find(|f| f.entry == entry)
        .map(|f| (f.reserved + free, entry)))
}

/// For the `oom` entry at source index `entry`.
pub fn avoided_by(h: &History, entry: usize) -> Result<Option<Avoidance>, String> {
    let Some(i) = h.source_index.iter().position(|&s| s == entry) else {
        return Ok(None);
    };
    let Some((capacity, _)) = card_at(h, i)? else {
        return Ok(None);
    };
    let card = Driver::Card(Some(capacity));
    // Served: the replay got past the entry with nothing failed up to it; no verdict where
    // it stopped before, at a request it does not model.
    let served = |o: super::Outcome| -> Result<bool, String> {
        if let Some(stop) = o.not_modelled.filter(|d| d.entry <= entry) {
            return Err(stop.message);
        }
        Ok(o.failures.iter().all(|f| f.entry > entry) && o.replayed > i)
    };
    let reproduced = !served(replay(h, &h.settings, card, false)?)?;
    let mut settings = Vec::new();
    let mut already_set = Vec::new();
    if reproduced {
        for conf in COMMON {
            let mut s = h.settings.clone();
            s.set(conf)?;
            if s == h.settings {
                already_set.push(conf);
                continue;
            }
            settings.push((conf, replay(h, &s, card, false).and_then(served)));
        }
    }
    Ok(Some(Avoidance {
        capacity,
        reproduced,
        settings,
        already_set,
    }))
}
