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
//! batches: its events would outweigh its decoded file.

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

fn open(f: &Path, all_frames: bool) -> Result<Opened, String> {
    let mut snap = SnapshotEvents::open(f, all_frames)?;
    if snap.history_entries() >= THREAD_ENTRIES {
        return Ok(Opened { snap, made: None });
    }
    let mut made = MadeEvents::default();
    while let Some(e) = snap.next_event() {
        made.push(e);
    }
    made.shrink();
    snap.release_file();
    Ok(Opened {
        snap,
        made: Some(made),
    })
}

/// Opens every file of `files` (snapshots, all of them), in their order; errors name the
/// file.
pub fn open_all(files: &[PathBuf], all_frames: bool) -> Vec<Result<Opened, String>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    if threads <= 1 {
        return files.iter().map(|f| open(f, all_frames)).collect();
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
                let events = open(f, all_frames);
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
