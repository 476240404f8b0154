//! The file read, and its history entries' bytes read ([`fast::scan`]), on a thread of its
//! own ahead of the machine: the machine then only looks up each entry's memo references
//! ([`fast::resolve`]). Decoding a snapshot takes the longer of the two halves rather than
//! their sum.
//!
//! Where a scanned entry starts need not be an opcode boundary: the thread searches for
//! `EMPTY_DICT` bytes and does not follow the opcodes. The machine uses an entry only at an
//! `EMPTY_DICT` it runs, at that very offset, and the bytes from there are the ones
//! scanned, so a match inside a string's bytes is never used (and at worst hides a real
//! entry, which the machine then reads opcode by opcode).

use super::fast::{self, Raw};
use std::io::{self, Read};
use std::sync::mpsc::{Receiver, SyncSender};

/// Bytes sent to the machine at once, and chunks read ahead of it: about 1 MB.
pub const CHUNK: usize = 1 << 18;
pub const AHEAD: usize = 3;

/// Bytes of the stream in order, with the entries that start in them.
pub struct Chunk {
    bytes: Vec<u8>,
    raws: Vec<Raw>,
    /// The read error that ended the stream after these bytes.
    error: Option<io::Error>,
}

/// Reads `reader` to its end (or until the machine stops taking chunks) into `chunks` of
/// `chunk` bytes ([`CHUNK`]; tests make them small).
pub fn read(reader: &mut dyn Read, chunks: SyncSender<Chunk>, chunk: usize) {
    let mut buf: Vec<u8> = Vec::new();
    // Stream offset of buf[0]; where in buf the search for entries goes on.
    let mut base = 0;
    let mut from = 0;
    loop {
        let (mut ended, mut error) = (false, None);
        while buf.len() < chunk + fast::MAX_BYTES {
            let len = buf.len();
            buf.resize(chunk + fast::MAX_BYTES, 0);
            let got = reader.read(&mut buf[len..]);
            buf.truncate(len + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => ended = true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => error = Some(e),
            }
            break;
        }
        let last = ended || error.is_some();
        // An entry that starts before `limit` lies whole in `buf`, if the stream has it.
        let limit = if last {
            buf.len()
        } else {
            buf.len() - fast::MAX_BYTES
        };
        // Room for an entry every 40 bytes (PyTorch's take 50-60): a Vec grown by
        // doubling would copy its records over and over.
        let mut raws = Vec::with_capacity(limit.saturating_sub(from) / 40);
        while from < limit {
            let Some(k) = buf[from..limit].iter().position(|&c| c == b'}') else {
                from = limit;
                break;
            };
            let at = from + k;
            match fast::scan(&buf[at + 1..], base + at) {
                Some(raw) => {
                    from = at + 1 + raw.len();
                    raws.push(raw);
                }
                None => from = at + 1,
            }
        }
        let tail = buf.split_off(limit);
        let bytes = std::mem::replace(&mut buf, tail);
        base += limit;
        from -= limit;
        let chunk = Chunk { bytes, raws, error };
        if chunks.send(chunk).is_err() || last {
            return;
        }
    }
}

/// The machine's end: the stream's bytes, and the entries scanned in them.
pub struct Ahead {
    chunks: Receiver<Chunk>,
    bytes: Vec<u8>,
    at: usize,
    /// The entries scanned in the chunk being read, from `next` on: those of earlier
    /// chunks are behind the machine (it has read all but the few bytes of an argument or
    /// entry it is completing when it takes the next chunk).
    raws: Vec<Raw>,
    next: usize,
    error: Option<io::Error>,
}

impl Ahead {
    pub fn new(chunks: Receiver<Chunk>) -> Ahead {
        Ahead {
            chunks,
            bytes: Vec::new(),
            at: 0,
            raws: Vec::new(),
            next: 0,
            error: None,
        }
    }

    /// The entry scanned at stream offset `at`, if one was; those before it are dropped
    /// (the machine has passed them); it goes when a later one is asked for.
    pub fn raw_at(&mut self, at: usize) -> Option<&Raw> {
        self.pass(at);
        self.raws.get(self.next).filter(|r| r.at == at)
    }

    /// Passes over the entries scanned before stream offset `at`, which the machine will
    /// not ask for: bytes it has read or is reading as an argument (a long string of
    /// bytes `}(u` is an entry scanned every 3 bytes; a chunk's are dropped with it).
    pub fn pass(&mut self, at: usize) {
        while self.raws.get(self.next).is_some_and(|r| r.at < at) {
            self.next += 1;
        }
    }

    /// Entries scanned and kept.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.raws.len() - self.next
    }
}

impl Read for Ahead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.at < self.bytes.len() {
                let n = out.len().min(self.bytes.len() - self.at);
                out[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            if let Some(e) = self.error.take() {
                return Err(e);
            }
            let Ok(chunk) = self.chunks.recv() else {
                return Ok(0);
            };
            self.bytes = chunk.bytes;
            self.at = 0;
            self.raws = chunk.raws;
            self.next = 0;
            self.error = chunk.error;
        }
    }
}
