//! Sizes and times as people read them: binary units (KiB, MiB, GiB), seconds.

use bytesize::ByteSize;

/// `1.5 GiB`, `512 B`.
pub fn bytes(n: u64) -> String {
    ByteSize::b(n).display().iec().to_string()
}

/// Parses `80GiB`, `512 MiB`, `1.5GiB`, `1073741824` (binary units are powers of 1024;
/// `GB` is 10^9, as written).
pub fn parse_size(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("invalid size {s:?}: {e} (e.g. 80GiB, 512MiB, 1073741824)"))
}

/// Nanoseconds as seconds with millisecond precision: `12.345s`.
pub fn seconds(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(seconds(1_234_500_000), "1.234s");
    }
}
