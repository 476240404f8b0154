//! A progress bar on stderr while large traces are read, only when stderr and stdout are
//! a terminal: never in a pipe, a file or a redirected `--json`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Below this many bytes of traces, reading takes less than a moment: no bar.
const LARGE_INPUT: u64 = 64 << 20;

/// Counts the bytes read through it, for the bar.
pub struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

pub struct Progress {
    bar: Option<ProgressBar>,
    read: Arc<AtomicU64>,
}

impl Progress {
    /// A bar for `total` bytes of input, shown only on a terminal and for a large input.
    pub fn new(total: u64) -> Progress {
        let shown = std::io::stderr().is_terminal() && std::io::stdout().is_terminal();
        let bar = (total >= LARGE_INPUT && shown).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "reading traces {bar:40} {binary_bytes}/{binary_total_bytes} ({eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Progress {
            bar,
            read: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn wrap<R: Read>(&self, inner: R) -> Counting<R> {
        Counting {
            inner,
            read: self.read.clone(),
        }
    }

    /// Counts `bytes` read by a reader of its own (PyTorch snapshots, decoded whole before
    /// the traces are read), so that the bar does not stand still through them.
    pub fn read_elsewhere(&self, bytes: u64) {
        self.read.fetch_add(bytes, Ordering::Relaxed);
        self.tick();
    }

    /// Moves the bar to the bytes read so far.
    pub fn tick(&self) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.read.load(Ordering::Relaxed));
        }
    }

    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
