//! Sizes and times as people read them: binary units (KiB, MiB, GiB), seconds.

use bytesize::ByteSize;

/// `1.5 GiB`, `512 B`.
pub fn bytes(n: u64) -> String {
    ByteSize::b(n).display().iec().to_string()
}

/// Parses `80GiB`, `24G`, `512 MiB`, `1.5GiB`, `1073741824`: every unit is a power of 1024.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let hint = "use e.g. 80GiB, 24G, 512MiB or 1073741824";
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    // Every unit is binary, as Slurm and Docker read them: `24G`, `24GB` and `24GiB` are
    // all 24 x 2^30 bytes. A card sold as "80GB" holds 80 GiB, so reading GB as 10^9 would
    // describe a smaller card than the one meant.
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("invalid size {s:?}: unknown unit {unit:?}; {hint}")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: {hint}"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("invalid size {s:?}: out of range; {hint}"));
    }
    Ok(bytes.round() as u64)
}

/// `1 block`, `6 blocks`, `2 processes`: a count with its noun, singular only for one.
pub fn count(n: u64, one: &str) -> String {
    match (n, one.ends_with('s')) {
        (1, _) => format!("1 {one}"),
        (_, true) => format!("{n} {one}es"),
        (_, false) => format!("{n} {one}s"),
    }
}

/// `part` as a whole percentage of `whole` (not 0): `12%`; a share that rounds to 0% or
/// 100% without being it says `<1%` or `>99%`, so that a change never reads as none, nor
/// as all of it.
pub fn percent(part: u64, whole: u64) -> String {
    let p = part as f64 * 100.0 / whole.max(1) as f64;
    match p.round() {
        0.0 if part > 0 => "<1%".into(),
        100.0 if part < whole => ">99%".into(),
        r => format!("{r:.0}%"),
    }
}

/// Nanoseconds as seconds with millisecond precision: `12.345s`.
pub fn seconds(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

/// Parses a duration: `10ms`, `1.5s`, `250us`, `100ns`, `2m`; a bare number is seconds.
/// Returns nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" | "\u{b5}s" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: use e.g. 10ms, 1.5s, 250us"
            ))
        }
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(format!(
            "invalid duration {s:?}: use e.g. 10ms, 1.5s, 250us"
        )),
    }
}

/// Wall clock of `unix_ns` in UTC: `2026-12-01 14:03:22.123 UTC`.
pub fn wall(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let ms = (unix_ns / 1_000_000) % 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03} UTC",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A run time with its wall clock: `12.345s (2026-12-01 14:03:22.123 UTC)`.
pub fn when(run_start_unix_ns: u64, t: u64) -> String {
    format!("{} ({})", seconds(t), wall(run_start_unix_ns + t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentage_is_neither_none_nor_all_unless_it_is() {
        assert_eq!(percent(0, 200), "0%");
        assert_eq!(percent(1, 1000), "<1%");
        assert_eq!(percent(199, 200), ">99%");
        assert_eq!(percent(200, 200), "100%");
        assert_eq!(percent(50, 200), "25%");
        assert_eq!(percent(600, 200), "300%");
    }

    #[test]
    fn durations_and_wall_clock() {
        assert_eq!(parse_duration("10ms").unwrap(), 10_000_000);
        assert_eq!(parse_duration("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration("2").unwrap(), 2_000_000_000);
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
        assert!(parse_duration("soon").is_err());
        // 2000-03-01 00:00:00 UTC is 951868800 s after the epoch.
        assert_eq!(wall(951_868_800_000_000_000), "2000-03-01 00:00:00.000 UTC");
        assert_eq!(wall(1_500_000), "1970-01-01 00:00:00.001 UTC");
    }

    #[test]
    fn binary_units() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        // Binary whatever the spelling, as Slurm and Docker read sizes.
        assert_eq!(parse_size("24G").unwrap(), 24 << 30);
        assert_eq!(parse_size("24GB").unwrap(), 24 << 30);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert!(parse_size("24 bananas").is_err());
        assert!(parse_size("99999999T").is_err());
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(seconds(1_234_500_000), "1.234s");
    }

    #[test]
    fn counts_take_the_plural_except_for_one() {
        assert_eq!(count(1, "block"), "1 block");
        assert_eq!(count(0, "failed allocation"), "0 failed allocations");
        assert_eq!(count(2, "process"), "2 processes");
        assert_eq!(count(1, "process"), "1 process");
    }
}
