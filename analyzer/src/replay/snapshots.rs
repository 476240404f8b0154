//! The PyTorch snapshots among a run's files, decoded and rewound on threads of their own
//! (as many as there are CPUs), so that a directory of per-rank snapshots takes the time
//! of the largest one per CPU rather than the sum.
//!
//! A small snapshot's events are all made there too, and its decoded file dropped: the
//! replay merges every source by time, so it holds every snapshot of the run until its
//! last event. Made lazily, each of a directory's snapshots stayed decoded the whole
//! replay (3.6 MB for a 1-MB file), and the merge, stepping from one to the next at each
//! event, read each one's frames out of cache (three times the time of the file alone).
//! A large one is made on a thread beside the replay instead (`feed.rs`), in bounded
//! batches: its events would outweigh its decoded file. So is a small one whose events
//! would pass the run's budget for made events ([`MADE_BUDGET`], and 16 bytes per byte of its file: one history entry of an
//! expandable segment maps or unmaps every page, two events each, and 32,000 such entries
//! made 33 million events, 3.2 GB), and every snapshot of a replay that stops early
//! (`--at`: made at once, the whole history was made for the first moments).

use super::feed::THREAD_ENTRIES;
use super::made::MadeEvents;
use crate::snapshot::events::SnapshotEvents;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// An opened snapshot, and its events where they were made at once.
pub struct Opened {
    pub snap: SnapshotEvents,
    pub made: Option<MadeEvents>,
}

/// The most memory the made events of a run's snapshots take together; past it, a
/// snapshot's events are made beside the replay instead.
pub const MADE_BUDGET: usize = 256 << 20;

/// The most memory one snapshot's made events take, per byte of its file (a 1-MB file's
/// ordinary history makes about 3 MB of them).
const MADE_PER_FILE_BYTE: usize = 16;

/// Events made between two looks at the budget.
const LOOK_EVERY: usize = 4096;

fn open(f: &Path, all_frames: bool, make: bool, spent: &AtomicUsize) -> Result<Opened, String> {
    let mut snap = SnapshotEvents::open(f, all_frames)?;
    if !make || snap.history_entries() >= THREAD_ENTRIES {
        return Ok(Opened { snap, made: None });
    }
    let file_bytes = std::fs::metadata(f).map_or(0, |m| m.len() as usize);
    let most = file_bytes.saturating_mul(MADE_PER_FILE_BYTE).max(1 << 20);
    let mut made = MadeEvents::default();
    while let Some(e) = snap.next_event() {
        made.push(e);
        if made.len() % LOOK_EVERY == 0
            && (made.bytes() > most || spent.load(Ordering::Relaxed) + made.bytes() > MADE_BUDGET)
        {
            // Too many events to hold: opened again, its events made as the replay goes.
            drop(made);
            let snap = SnapshotEvents::open(f, all_frames)?;
            return Ok(Opened { snap, made: None });
        }
    }
    made.shrink();
    spent.fetch_add(made.bytes(), Ordering::Relaxed);
    snap.release_file();
    Ok(Opened {
        snap,
        made: Some(made),
    })
}

/// Opens every file of `files` (snapshots, all of them), in their order; errors name the
/// file. `make`: the small ones' events are made at once (not for a replay that stops
/// early).
pub fn open_all(files: &[PathBuf], all_frames: bool, make: bool) -> Vec<Result<Opened, String>> {
    let spent = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    if threads <= 1 {
        return files
            .iter()
            .map(|f| open(f, all_frames, make, &spent))
            .collect();
    }
    let next = AtomicUsize::new(0);
    let opened: Mutex<Vec<Option<Result<Opened, String>>>> =
        Mutex::new(files.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else {
                    break;
                };
                let events = open(f, all_frames, make, &spent);
                opened.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(events);
            });
        }
    });
    let opened = opened.into_inner().unwrap_or_else(|e| e.into_inner());
    opened
        .into_iter()
        .zip(files)
        .map(|(o, f)| o.unwrap_or_else(|| Err(format!("{}: not read", f.display()))))
        .collect()
}
