//! The text of protocol 0's arguments: STRING and UNICODE escapes, and integers as
//! Python's `int()` reads them.

/// Python 2 `repr` escapes inside a STRING argument.
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('x') => {
                let h: String = chars.by_ref().take(2).collect();
                match u8::from_str_radix(&h, 16) {
                    Ok(b) => out.push(b as char),
                    Err(_) => {
                        out.push_str("\\x");
                        out.push_str(&h);
                    }
                }
            }
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// `raw-unicode-escape`: latin-1, with `\uXXXX` and `\UXXXXXXXX` for the rest.
pub fn raw_unicode_escape(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < chars.len() {
        let width = match (chars[i], chars.get(i + 1)) {
            ('\\', Some('u')) => 4,
            ('\\', Some('U')) => 8,
            _ => 0,
        };
        if width > 0 && i + 2 + width <= chars.len() {
            let hex: String = chars[i + 2..i + 2 + width].iter().collect();
            if let Some(c) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                out.push(c);
                i += 2 + width;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// C's `isspace`, which Python's `int()` and the C unpickler skip: vertical tab included.
fn c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// The text as a C function reads it: up to its first NUL.
pub fn c_string(text: &str) -> &str {
    text.split('\0').next().unwrap_or("")
}

/// A sign, and the rest.
fn signed(t: &str) -> (bool, &str) {
    match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    }
}

/// An integer as Python's `int(text, 0)` (`any_base`: INT and LONG) or `int(text)` (memo
/// indices) reads it (`PyLong_FromString`): surrounding whitespace, a sign, with
/// `any_base` a `0x`, `0o` or `0b` prefix (and no other leading zero), and single
/// underscores between digits. `None` where Python raises, or past 128 bits. The caller
/// cuts the text at a NUL first ([`c_string`]), as C does.
pub fn python_int(text: &str, any_base: bool) -> Option<i128> {
    let (negative, t) = signed(text.trim_matches(c_space));
    let prefixed = |p: &str| {
        t.get(..2)
            .filter(|head| head.eq_ignore_ascii_case(p))
            .map(|_| &t[2..])
    };
    let (radix, digits) = match (any_base, prefixed("0x"), prefixed("0o"), prefixed("0b")) {
        (true, Some(d), _, _) => (16, d.strip_prefix('_').unwrap_or(d)),
        (true, _, Some(d), _) => (8, d.strip_prefix('_').unwrap_or(d)),
        (true, _, _, Some(d)) => (2, d.strip_prefix('_').unwrap_or(d)),
        _ => (10, t),
    };
    let bytes = digits.as_bytes();
    let well_placed =
        |i: usize, &c: &u8| c != b'_' || (i > 0 && i + 1 < bytes.len() && bytes[i - 1] != b'_');
    if bytes.is_empty() || !bytes.iter().enumerate().all(|(i, c)| well_placed(i, c)) {
        return None;
    }
    let plain: String = digits.chars().filter(|&c| c != '_').collect();
    // `int("010", 0)` is an error (an old octal literal); zeros alone are 0.
    if any_base && radix == 10 && plain.starts_with('0') && plain.bytes().any(|c| c != b'0') {
        return None;
    }
    if !plain.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u128::from_str_radix(&plain, radix).ok()?;
    if negative {
        0i128.checked_sub_unsigned(magnitude)
    } else {
        i128::try_from(magnitude).ok()
    }
}

/// What C's `strtol(text, &end, 0)` gives where it reads `text` (cut at a NUL) to its
/// end without overflowing a `long`: leading whitespace, a sign, then `0x` and hex
/// digits, a 0 and octal digits (`010` is 8), or decimal digits; an empty text is 0 (no
/// digits, and nothing left either). Python's C unpickler reads INT so before anything
/// else, and takes `int(text, 0)` where this is `None`.
pub fn c_strtol(text: &str) -> Option<i64> {
    if text.is_empty() {
        return Some(0);
    }
    let (negative, t) = signed(text.trim_start_matches(c_space));
    let hex = t
        .get(..2)
        .filter(|p| p.eq_ignore_ascii_case("0x"))
        .filter(|_| t[2..].starts_with(|c: char| c.is_ascii_hexdigit()));
    let (radix, digits) = match (hex, t.starts_with('0')) {
        (Some(_), _) => (16, &t[2..]),
        (None, true) => (8, t),
        (None, false) => (10, t),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        (magnitude <= 1 << 63).then(|| (magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}
