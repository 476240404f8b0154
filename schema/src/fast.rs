//! The common case, parsed by hand: an event line exactly as the interposer writes it
//! (`{"t":1,"tid":2,...}`: no spaces, integer values, one string). Anything else - other
//! records, hand-edited or foreign JSON - is left to serde, which gives the same result
//! and the error messages. This keeps reading at several million events per second.

use crate::api::Api;
use crate::event::Event;
use crate::location::Location;

/// The event on `line`, or `None` to let the general parser decide.
pub fn event(line: &[u8]) -> Option<Event> {
    let mut p = Parser { s: line, i: 0 };
    let mut e = Event::new(0, 0, -1, Api::CudaMalloc, 0);
    // The interposer writes the first five keys in this order: read them without
    // comparing keys, then the optional ones by name.
    p.literal(b"{\"t\":")?;
    e.t = p.unsigned()?;
    p.literal(b",\"tid\":")?;
    e.tid = u32::try_from(p.unsigned()?).ok()?;
    p.literal(b",\"dev\":")?;
    e.dev = i32::try_from(p.signed()?).ok()?;
    p.literal(b",\"api\":\"")?;
    e.api = api(p.until_quote()?)?;
    p.literal(b",\"res\":")?;
    e.res = i32::try_from(p.signed()?).ok()?;
    match p.next()? {
        b'}' => return (p.i == line.len()).then_some(e),
        b',' => {}
        _ => return None,
    }
    let (mut have_t, mut have_api) = (true, true);
    loop {
        p.byte(b'"')?;
        let key = p.until_quote()?;
        p.byte(b':')?;
        match key {
            b"api" => {
                p.byte(b'"')?;
                e.api = api(p.until_quote()?)?;
                have_api = true;
            }
            b"t" => {
                e.t = p.unsigned()?;
                have_t = true;
            }
            b"tid" => e.tid = u32::try_from(p.unsigned()?).ok()?,
            b"dev" => e.dev = i32::try_from(p.signed()?).ok()?,
            b"res" => e.res = i32::try_from(p.signed()?).ok()?,
            b"addr" => e.addr = p.unsigned()?,
            b"size" => e.size = p.unsigned()?,
            b"stream" => e.stream = Some(p.unsigned()?),
            b"pool" => e.pool = Some(p.unsigned()?),
            b"handle" => e.handle = Some(p.unsigned()?),
            b"offset" => e.offset = Some(p.unsigned()?),
            b"free" => e.free = Some(p.unsigned()?),
            b"total" => e.total = Some(p.unsigned()?),
            b"requested" => e.requested = Some(p.unsigned()?),
            b"loc" => {
                p.byte(b'"')?;
                e.loc = Location::from_name(std::str::from_utf8(p.until_quote()?).ok()?)?;
            }
            b"numa" => e.numa = Some(u32::try_from(p.unsigned()?).ok()?),
            b"stack" => e.stack = p.unsigned()?,
            _ => return None,
        }
        match p.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    (p.i == line.len() && have_t && have_api).then_some(e)
}

/// The API named by `name`.
fn api(name: &[u8]) -> Option<Api> {
    std::str::from_utf8(name).ok().and_then(Api::from_name)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn next(&mut self) -> Option<u8> {
        let b = *self.s.get(self.i)?;
        self.i += 1;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    fn literal(&mut self, want: &[u8]) -> Option<()> {
        let end = self.i + want.len();
        (self.s.get(self.i..end)? == want).then(|| self.i = end)
    }

    /// Bytes up to the closing quote; `None` on an escape (serde handles those).
    fn until_quote(&mut self) -> Option<&'a [u8]> {
        let rest = self.s.get(self.i..)?;
        let n = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
        if rest[n] == b'\\' {
            return None;
        }
        self.i += n + 1;
        Some(&rest[..n])
    }

    fn unsigned(&mut self) -> Option<u64> {
        let rest = self.s.get(self.i..)?;
        let len = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        // No digits, or a leading zero of a longer number: not this writer's JSON.
        if len == 0 || (len > 1 && rest[0] == b'0') || len > 20 {
            return None;
        }
        let digits = &rest[..len];
        self.i += len;
        // Nineteen digits cannot overflow a u64; only a twentieth is checked.
        let (head, last) = digits.split_at(len.min(19));
        let v = head.iter().fold(0u64, |v, &b| v * 10 + (b - b'0') as u64);
        match last.first() {
            None => Some(v),
            Some(&b) => v.checked_mul(10)?.checked_add((b - b'0') as u64),
        }
    }

    fn signed(&mut self) -> Option<i64> {
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
            let v = self.unsigned()?;
            return (v <= i64::MAX as u64 + 1).then(|| (v as i128).wrapping_neg() as i64);
        }
        i64::try_from(self.unsigned()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::JsonBuf;

    #[test]
    fn reads_what_the_writer_writes() {
        let mut e = Event::new(123, 7, -1, Api::CuMemCreate, 2);
        e.size = 1 << 21;
        e.handle = Some(99);
        e.requested = Some(5);
        e.loc = crate::Location::HostNuma;
        e.numa = Some(1);
        e.stack = 4;
        let mut b = JsonBuf::new();
        e.write_json(&mut b);
        let line = &b.as_bytes()[..b.as_bytes().len() - 1];
        assert_eq!(event(line), Some(e));
    }

    #[test]
    fn leaves_anything_else_to_the_general_parser() {
        for line in [
            &br#"{"t": 1,"api":"cudaMalloc"}"#[..],
            br#"{"t":1,"api":"cudaMalloc","size":1.5}"#,
            br#"{"t":1,"api":"cu\u004dem"}"#,
            br#"{"t":1,"api":"notAnApi"}"#,
            br#"{"t":1}"#,
            br#"{"t":01,"api":"cudaMalloc"}"#,
            br#"{"t":1,"api":"cudaMalloc"} x"#,
            br#"{"t":99999999999999999999,"api":"cudaMalloc"}"#,
            br#"{"end":{"t":1}}"#,
        ] {
            assert_eq!(event(line), None, "{}", String::from_utf8_lossy(line));
        }
    }
}
