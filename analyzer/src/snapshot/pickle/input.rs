//! The bytes of a pickle, read from a stream a window at a time: a snapshot of 2 GB is
//! never held whole in memory, only the objects decoded from it.

use super::ahead::Ahead;
use super::fast::Raw;
use std::io::Read;

/// The least read from the stream at once.
const CHUNK: usize = 1 << 16;

/// Where the bytes come from: the stream itself, or the thread reading it ahead.
pub enum Source<'r> {
    Stream(&'r mut dyn Read),
    Ahead(Ahead),
}

pub struct Input<'r> {
    source: Source<'r>,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Offset in the stream of `buf[0]`.
    base: usize,
    /// A read error, kept to be reported as what it was rather than as a truncated file.
    pub error: Option<std::io::Error>,
}

impl<'r> Input<'r> {
    pub fn new(source: Source<'r>) -> Input<'r> {
        Input {
            source,
            buf: Vec::new(),
            start: 0,
            end: 0,
            base: 0,
            error: None,
        }
    }

    /// Whether a thread reads the stream ahead, scanning history entries.
    pub fn is_ahead(&self) -> bool {
        matches!(self.source, Source::Ahead(_))
    }

    /// The history entry the thread reading ahead scanned at stream offset `at`.
    pub fn raw_at(&mut self, at: usize) -> Option<&Raw> {
        match &mut self.source {
            Source::Ahead(ahead) => ahead.raw_at(at),
            Source::Stream(_) => None,
        }
    }

    /// Bytes the window holds: as much as the longest argument or line read.
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Offset in the stream of the next unread byte.
    pub fn offset(&self) -> usize {
        self.base + self.start
    }

    /// Bytes available without reading more.
    fn available(&self) -> usize {
        self.end - self.start
    }

    /// Reads until at least `n` bytes are available or the stream ends. The buffer grows
    /// with what arrives, never ahead of it: a length field of 2^60 in a short file costs
    /// nothing but the file.
    fn fill(&mut self, n: usize) -> bool {
        if self.available() >= n {
            return true;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start;
            self.end -= self.start;
            self.start = 0;
        }
        while self.available() < n {
            let want = (n - self.available()).clamp(CHUNK, 1 << 26);
            if self.buf.len() < self.end + want {
                self.buf.resize(self.end + want, 0);
            }
            let into = &mut self.buf[self.end..];
            let got = match &mut self.source {
                Source::Stream(reader) => reader.read(into),
                Source::Ahead(ahead) => {
                    // The bytes before the n-th unread one are the argument being read
                    // (or a line's, where `line` fills): no entry starts there.
                    let passed = (self.base + self.start).saturating_add(n - 1);
                    let got = ahead.read(into);
                    ahead.pass(passed);
                    got
                }
            };
            match got {
                Ok(0) => return false,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    return false;
                }
            }
        }
        true
    }

    /// The next `n` bytes, or `None` (with what is left) when the stream ends first.
    pub fn take(&mut self, n: usize) -> Result<&[u8], usize> {
        if !self.fill(n) {
            return Err(self.available());
        }
        let s = &self.buf[self.start..self.start + n];
        self.start += n;
        Ok(s)
    }

    /// Up to `n` unread bytes, not consumed (fewer where the stream ends first).
    pub fn peek(&mut self, n: usize) -> &[u8] {
        self.fill(n);
        &self.buf[self.start..self.end.min(self.start + n)]
    }

    /// Consumes `n` bytes that [`Input::peek`] gave.
    pub fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.available());
        self.start += n;
    }

    pub fn byte(&mut self) -> Option<u8> {
        if self.start == self.end && !self.fill(1) {
            return None;
        }
        let b = self.buf[self.start];
        self.start += 1;
        Some(b)
    }

    /// The `n` bytes read before the last `skip` (a line's newline) again.
    pub fn last(&self, n: usize, skip: usize) -> &[u8] {
        let end = self.start - skip;
        &self.buf[end - n..end]
    }

    /// The bytes up to the next newline (which is consumed, not returned); `None` when
    /// the stream ends first.
    pub fn line(&mut self) -> Option<&[u8]> {
        let mut scanned = 0;
        loop {
            let newline = self.buf[self.start + scanned..self.end]
                .iter()
                .position(|&c| c == b'\n');
            if let Some(i) = newline {
                let (from, at) = (self.start, self.start + scanned + i);
                self.start = at + 1;
                return Some(&self.buf[from..at]);
            }
            scanned = self.available();
            if !self.fill(scanned + 1) {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ahead;
    use super::*;

    #[test]
    fn entries_scanned_inside_a_long_argument_are_not_kept() {
        // `}(u` over and over, read as one argument: each is scanned as an entry (of no
        // keys), and was kept until the machine ran an EMPTY_DICT: 100 MB of them took
        // 6 GB. Those the read passed are dropped; the last, where the machine may go on,
        // is kept.
        let data = b"}(u".repeat(100_000);
        std::thread::scope(|scope| {
            let (send, chunks) = std::sync::mpsc::sync_channel(ahead::AHEAD);
            let mut reader = data.as_slice();
            scope.spawn(move || ahead::read(&mut reader, send, 4096));
            let mut input = Input::new(Source::Ahead(Ahead::new(chunks)));
            assert!(input.take(data.len() - 3).is_ok());
            let Source::Ahead(a) = &input.source else {
                unreachable!()
            };
            assert!(a.pending() < 4096, "{} entries kept", a.pending());
            assert!(input.raw_at(data.len() - 3).is_some());
        });
    }
}
