//! A fixed-capacity line buffer for writing records without allocating.

/// Where formatted JSON goes: a stack buffer of one line or more. Bytes past the capacity
/// are dropped and [`JsonBuf::overflowed`] says so; records are far shorter than it.
pub struct JsonBuf {
    bytes: [u8; JsonBuf::CAPACITY],
    len: usize,
    overflowed: bool,
}

/// Where records are formatted: a [`JsonBuf`] on the stack (signal handlers), or the
/// writer's growing `Vec<u8>` (no copy through a line buffer).
pub trait JsonOut {
    fn bytes(&mut self, b: &[u8]);

    /// Text that needs no JSON escaping (keys, API names, numbers).
    fn raw(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.bytes(itoa::Buffer::new().format(v).as_bytes());
    }

    fn i64(&mut self, v: i64) {
        if v < 0 {
            self.bytes(b"-");
        }
        self.u64(v.unsigned_abs());
    }
}

impl JsonOut for Vec<u8> {
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

impl JsonOut for JsonBuf {
    fn bytes(&mut self, b: &[u8]) {
        JsonBuf::bytes(self, b);
    }
}

impl Default for JsonBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonBuf {
    pub const CAPACITY: usize = 512;

    pub const fn new() -> JsonBuf {
        JsonBuf {
            bytes: [0; JsonBuf::CAPACITY],
            len: 0,
            overflowed: false,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Appends text that needs no JSON escaping (keys, API names, numbers).
    #[inline]
    pub fn raw(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        if self.len + b.len() > Self::CAPACITY {
            self.overflowed = true;
            return;
        }
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    #[inline]
    pub fn u64(&mut self, v: u64) {
        JsonOut::u64(self, v);
    }

    #[inline]
    pub fn i64(&mut self, v: i64) {
        JsonOut::i64(self, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_like_json() {
        let mut b = JsonBuf::new();
        b.u64(0);
        b.raw(",");
        b.u64(u64::MAX);
        b.raw(",");
        b.i64(-2);
        b.raw(",");
        b.i64(i64::MIN);
        assert_eq!(
            std::str::from_utf8(b.as_bytes()).unwrap(),
            "0,18446744073709551615,-2,-9223372036854775808"
        );
    }

    #[test]
    fn overflow_is_reported_not_a_panic() {
        let mut b = JsonBuf::new();
        for _ in 0..JsonBuf::CAPACITY {
            b.raw("xy");
        }
        assert!(b.overflowed());
        // Whole pieces up to the capacity, none cut.
        assert_eq!(b.as_bytes(), "xy".repeat(JsonBuf::CAPACITY / 2).as_bytes());
    }
}
