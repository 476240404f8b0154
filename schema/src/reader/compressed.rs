//! Inputs compressed for upload: gzip (`.gz`) and zstd (`.zst`) files are read as the
//! bytes they hold, told apart by their magic numbers rather than their names, so that a
//! renamed file still reads.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// How a file's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// From the first bytes of a file.
    pub fn sniff(first: &[u8]) -> Compression {
        if first.starts_with(GZIP_MAGIC) {
            Compression::Gzip
        } else if first.starts_with(ZSTD_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// Opens `path` for reading its content, decompressing gzip and zstd.
pub fn open(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    decompressed(File::open(path)?)
}

/// `input`'s content, decompressed where it is gzip or zstd.
pub fn decompressed<R: Read + Send + 'static>(input: R) -> io::Result<Box<dyn Read + Send>> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let kind = Compression::sniff(input.fill_buf()?);
    Ok(match kind {
        Compression::None => Box::new(input),
        // Multi-member: `cat a.gz b.gz` and pigz output are one stream of several members.
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
    })
}

/// Whether a file name ends in a compressed suffix (`.gz`, `.zst`).
pub fn compressed_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz" || e == "zst")
}

/// The name without a compressed suffix: `a.jsonl.gz` -> `a.jsonl`.
pub fn inner_name(path: &Path) -> &Path {
    if compressed_name(path) {
        path.file_stem().map(Path::new).unwrap_or(path)
    } else {
        path
    }
}
