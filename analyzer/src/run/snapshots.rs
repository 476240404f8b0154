//! The PyTorch snapshots among a run's files, decoded and rewound on threads of their own
//! (as many as there are CPUs), so that a directory of per-rank snapshots takes the time
//! of the largest one per CPU rather than the sum. Each is held whole until the replay has
//! read it, whichever thread opened it.

use crate::snapshot::events::SnapshotEvents;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

type Opened = Result<SnapshotEvents, String>;

/// Opens every file of `files` (snapshots, all of them), in their order; errors name the
/// file.
pub fn open_all(files: &[PathBuf], all_frames: bool) -> Vec<Opened> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    if threads <= 1 {
        return files
            .iter()
            .map(|f| SnapshotEvents::open(f, all_frames))
            .collect();
    }
    let next = AtomicUsize::new(0);
    let opened: Mutex<Vec<Option<Opened>>> = Mutex::new(files.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else {
                    break;
                };
                let events = SnapshotEvents::open(f, all_frames);
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
