//! The caching allocator's size rules: how a request is rounded into a block size, which
//! pool serves it, how large a segment a new block needs, and when a free block that is
//! larger than the request is split (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.0-2.x).

use super::settings::Settings;

pub const MIB: u64 = 1 << 20;
/// Every block size is a multiple of this.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Blocks of this size or less come from the small pool.
pub const SMALL_SIZE: u64 = MIB;
/// Segment size for small-pool blocks.
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// Segment size for large-pool blocks under `MIN_LARGE_ALLOC`.
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// Large blocks at least this size get a segment of their own, rounded to `ROUND_LARGE`.
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
pub const ROUND_LARGE: u64 = 2 * MIB;

/// Which pool a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pool {
    Small,
    Large,
}

impl Pool {
    pub fn of_size(block_size: u64) -> Pool {
        if block_size <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pool::Small => "small",
            Pool::Large => "large",
        }
    }
}

/// The block size for a request of `size` bytes: a multiple of 512, or with
/// `roundup_power2_divisions` the next of N equal steps between two powers of two.
pub fn round_size(size: u64, settings: &Settings) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let divisions = settings.divisions_for(size);
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        next_division(size, divisions)
    } else {
        // Saturating: a crafted snapshot's size near 2^64 is then one no block fits.
        size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
    }
}

/// The next boundary of `divisions` equal steps between the powers of two around `size`.
fn next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    // The step is the power-of-two floor divided by the largest power of two <= divisions.
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.saturating_add(step)
    }
}

/// The size of the segment `cudaMalloc` gets for a block of `size` bytes.
pub fn segment_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// Whether a free block of `block_size` serving `size` is split, the rest staying free.
/// Small blocks split when 512 bytes or more remain, and so does every block with
/// expandable segments on; large ones otherwise when more than 1 MiB remains and the
/// request is under `max_split_size` (oversize blocks are never split).
pub fn should_split(pool: Pool, block_size: u64, size: u64, settings: &Settings) -> bool {
    let remaining = block_size - size;
    if pool == Pool::Small || settings.expandable_segments {
        return remaining >= MIN_BLOCK_SIZE;
    }
    size < settings.max_split_size && remaining > SMALL_SIZE
}

/// The pool of a segment of `total_size` bytes: the small pool's segments are all 2 MiB,
/// and no large-pool segment is smaller than 10 MiB.
pub fn pool_of_segment(total_size: u64) -> Pool {
    if total_size <= SMALL_BUFFER {
        Pool::Small
    } else {
        Pool::Large
    }
}
