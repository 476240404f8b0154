//! Numbers drawn from a fixed seed (xorshift64), for tests that try many cases and must
//! try the same ones on every run.

/// A draw below `n` at each call.
pub fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}
