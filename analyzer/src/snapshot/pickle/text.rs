//! The text escapes of protocol 0's STRING and UNICODE arguments.

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
