//! A replay on a tight card, written as a snapshot (`-o`) and read back, replays as
//! recorded: the recorded driver follows every segment event the model made - segments
//! allocated and freed, expandable segments' pages mapped and unmapped on the
//! out-of-memory path - and every block lands where the first replay put it. Random
//! request streams on two streams, small and large, under the defaults and with
//! expandable segments.

use vramtrace_analyzer::snapshot::{
    memory_viz_bytes, parse_snapshot, Action, DeviceSnapshot, Snapshot,
};
use vramtrace_analyzer::whatif::from_snapshot::histories;
use vramtrace_analyzer::whatif::input::{Event, History};
use vramtrace_analyzer::whatif::search::smallest_capacity;
use vramtrace_analyzer::whatif::{replay, write, Driver, Outcome, Settings};

const MIB: u64 = 1 << 20;

/// A stream of `n` requests and frees, every block named by a distinct address.
fn random_history(seed: u64, n: usize) -> History {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut h = History::default();
    let mut live: Vec<(u64, u64)> = Vec::new();
    for i in 0..n {
        if live.len() > 3 && next() % 5 < 2 {
            let (addr, size) = live.swap_remove((next() as usize) % live.len());
            h.push(Event::FreeRequested { addr, size }, h.events.len());
            h.push(Event::FreeCompleted { addr, size }, h.events.len());
            continue;
        }
        let size = match next() % 10 {
            0..=5 => 1 + next() % MIB,
            6..=8 => MIB + next() % (12 * MIB),
            _ => 12 * MIB + next() % (40 * MIB),
        };
        let stream = if next() % 4 == 0 { 7 } else { 0 };
        let addr = 0x1000 + i as u64;
        live.push((addr, size));
        h.push(Event::Alloc { size, stream, addr }, h.events.len());
    }
    h
}

/// The recording read back from a replay of `seed` on the least card it fits.
fn recorded(settings: &Settings, seed: u64) -> (Outcome, Snapshot) {
    let h = random_history(seed, 3000);
    let cap = smallest_capacity(&h, settings)
        .unwrap()
        .smallest
        .expect("fits somewhere");
    let first = replay(&h, settings, Driver::Card(Some(cap)), true).unwrap();
    assert!(
        first.fits(),
        "seed {seed}: fits on the capacity the search found"
    );
    let source = DeviceSnapshot::default();
    let written = write::snapshot([(&first, &source)], settings);
    (first, parse_snapshot(&memory_viz_bytes(&written)).unwrap())
}

fn roundtrip(settings: &Settings, seed: u64) {
    let (first, read) = recorded(settings, seed);
    let settings_read = Settings::from_recorded(read.allocator_settings.as_ref()).unwrap();
    assert_eq!(&settings_read, settings);
    let mut hs = histories(&read, &settings_read).unwrap();
    let again = replay(&hs[0], &settings_read, Driver::Recorded, true).unwrap();
    assert_eq!(again.drift, None, "seed {seed}");
    let entries = |o: &Outcome| -> Vec<(&str, u64, u64)> {
        o.trace.iter().map(|e| (e.action, e.addr, e.size)).collect()
    };
    assert_eq!(entries(&again), entries(&first), "seed {seed}");
    assert_eq!(again.peak_reserved, first.peak_reserved);
    let segment_events = hs
        .remove(0)
        .events
        .iter()
        .filter(|e| e.is_segment_event())
        .count();
    assert!(
        segment_events > 2,
        "seed {seed}: the card made the model release and retry"
    );
}

#[test]
fn a_replay_written_and_read_back_replays_as_recorded() {
    for seed in 1..=3 {
        roundtrip(&Settings::default(), seed);
    }
}

#[test]
fn an_expandable_replay_written_and_read_back_replays_as_recorded() {
    let mut s = Settings::default();
    s.set("expandable_segments:True").unwrap();
    for seed in 1..=3 {
        roundtrip(&s, seed);
    }
}

/// A recording altered at one segment event (moved by a page, grown by a page, or left
/// out) drifts, and says where; it never brings the replay down.
#[test]
fn an_altered_expandable_recording_drifts_and_says_where() {
    let mut s = Settings::default();
    s.set("expandable_segments:True").unwrap();
    let (_, read) = recorded(&s, 2);
    let trace = &read.devices[0].trace;
    let segment_events: Vec<usize> = (0..trace.len())
        .filter(|&i| matches!(trace[i].action, Action::SegmentMap | Action::SegmentUnmap))
        .collect();
    assert!(segment_events.len() > 10);
    let mut replayed = 0;
    for (k, &i) in segment_events.iter().enumerate() {
        let mut altered = read.clone();
        let t = &mut altered.devices[0].trace;
        match k % 3 {
            0 => t[i].addr += 2 * MIB,
            1 => t[i].size += 20 * MIB,
            _ => {
                t.remove(i);
            }
        }
        let Ok(hs) = histories(&altered, &s) else {
            continue; // refused before any replay: the trace disagrees with the segments
        };
        let o = replay(&hs[0], &s, Driver::Recorded, false).unwrap();
        let d = o.drift.expect("an altered recording drifts");
        assert!(
            d.entry <= i + 1,
            "entry {i} altered, drift reported at {}",
            d.entry
        );
        replayed += 1;
    }
    assert!(replayed >= 3, "{replayed} altered recordings replayed");
}
