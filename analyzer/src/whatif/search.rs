//! The least capacity with which a replay does not fail: bisection in 2 MiB steps (every
//! segment size is a multiple of 2 MiB, so reserved memory moves in those steps) between
//! the segments held at the start and the peak reserved without limit: at most 17 replays
//! for a card of 80 GiB, 1 + log2(capacity / 2 MiB) in general.

use super::input::History;
use super::replay::{replay, Driver};
use crate::allocator::settings::Settings;
use crate::allocator::sizes::ROUND_LARGE;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// The least capacity found; `None` if the run fails even without limit (a recorded
    /// failure that no capacity avoids does not count).
    pub smallest: Option<u64>,
    pub replays: usize,
}

pub fn smallest_capacity(h: &History, settings: &Settings) -> Result<Search, String> {
    // Without a limit only a fraction of the card can fail, and the card is the unknown.
    let mut s = settings.clone();
    s.per_process_memory_fraction = None;
    let fits = |cap: Option<u64>| -> Result<bool, String> {
        Ok(replay(h, &s, Driver::Card(cap), false)?.fits())
    };
    let unlimited = replay(h, &s, Driver::Card(None), false)?;
    let mut replays = 1;
    if !unlimited.fits() {
        return Ok(Search {
            smallest: None,
            replays,
        });
    }
    let step = ROUND_LARGE;
    // In steps: `lo` fails (less than the segments held at the start), `hi` fits.
    let mut hi = unlimited.peak_reserved.div_ceil(step);
    let mut lo = unlimited.start_reserved.div_ceil(step).saturating_sub(1);
    if hi == 0 {
        return Ok(Search {
            smallest: Some(0),
            replays,
        });
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        replays += 1;
        if fits(Some(mid * step))? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Search {
        smallest: Some(hi * step),
        replays,
    })
}
