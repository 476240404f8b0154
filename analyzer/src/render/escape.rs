//! Escaping of strings that come from a trace (host, argv, GPU labels, frames, marker
//! names) for each kind of output. A trace is input like any other: a program can name
//! a function `\x1b]0;pwned\x07` or a host `<!--<script>`. Every renderer passes such
//! strings through the function for its output; renderers only format.
//!
//! Control characters (C0, DEL, C1) and the characters that reorder or break lines
//! (U+2028/2029, bidirectional overrides) are written as visible escapes (`\x1b`,
//! `\u{202e}`) in every output that a person reads: on a terminal they would clear the
//! screen, set colours or the window title; in XML they are not allowed at all.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a reader raw.
fn is_unsafe(c: char) -> bool {
    c.is_control() // C0, DEL, C1
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every [`is_unsafe`] character written as an escape, and the characters
/// `special` names replaced by what it gives.
fn escaped(s: &str, special: impl Fn(char) -> Option<&'static str>) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) || special(c).is_some()) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if let Some(replacement) = special(c) {
            out.push_str(replacement);
            continue;
        }
        let _ = match c {
            '\n' => write!(out, "\\n"),
            '\r' => write!(out, "\\r"),
            '\t' => write!(out, "\\t"),
            c if is_unsafe(c) && (c as u32) < 0x100 => write!(out, "\\x{:02x}", c as u32),
            c if is_unsafe(c) => write!(out, "\\u{{{:x}}}", c as u32),
            c => write!(out, "{c}"),
        };
    }
    Cow::Owned(out)
}

/// For terminal text (the text views, messages on stderr): one line, nothing a terminal
/// acts on.
pub fn terminal(s: &str) -> Cow<'_, str> {
    escaped(s, |_| None)
}

/// For a frame of folded-stack text (`outer;inner;... bytes`, as inferno and
/// flamegraph.pl read it): `;` separates frames, so it becomes `:` (what the
/// stackcollapse scripts do), and a line break would start a stack of its own.
pub fn folded(s: &str) -> Cow<'_, str> {
    escaped(s, |c| (c == ';').then_some(":"))
}

/// The entity of a character that HTML and XML give a meaning to.
fn entity(c: char) -> Option<&'static str> {
    match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        '\'' => Some("&#39;"),
        _ => None,
    }
}

/// For HTML and SVG (XML) text and attribute values.
pub fn markup(s: &str) -> Cow<'_, str> {
    escaped(s, entity)
}

/// A whole document as an attribute value (an `<iframe srcdoc>`): [`markup`], but line
/// breaks and tabs stay what they are, as character references (`&#10;`), for a script
/// in the document needs its line breaks; every other control is a visible escape.
pub fn document_attribute(s: &str) -> Cow<'_, str> {
    escaped(s, |c| match c {
        '\n' => Some("&#10;"),
        '\r' => Some("&#13;"),
        '\t' => Some("&#9;"),
        c => entity(c),
    })
}

/// JSON text (as serde_json writes it) made safe on a terminal: DEL, C1, U+2028/2029 and
/// the bidirectional controls, which serde_json leaves raw, as `\uXXXX`. Those characters
/// can only be inside JSON strings, where the escapes mean the same characters; C0
/// controls are escaped there already, and outside strings are the layout's whitespace.
pub fn json(s: &str) -> Cow<'_, str> {
    json_escaping(s, |c| is_unsafe(c) && c >= '\x7f')
}

/// [`json`] for inside an HTML `<script>` element: `<`, `>` and `&` as `\u003c` and the
/// like too, so no `</script>`, `<!--` or `<script` can end or swallow the element.
pub fn script_json(s: &str) -> Cow<'_, str> {
    json_escaping(s, |c| {
        (is_unsafe(c) && c >= '\x7f') || matches!(c, '<' | '>' | '&')
    })
}

fn json_escaping(s: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if escape(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A CSV field: control characters escaped as on a terminal; a leading `=`, `+`, `-` or
/// `@` (a formula to a spreadsheet, which can run commands) neutralised by a `'` before
/// it, and quoted, as is a field holding `,` or `"`.
pub fn csv(s: &str) -> Cow<'_, str> {
    let text = terminal(s);
    let formula = text.starts_with(['=', '+', '-', '@']);
    if !formula && !text.contains([',', '"']) {
        return text;
    }
    let quote = if formula { "'" } else { "" };
    Cow::Owned(format!("\"{quote}{}\"", text.replace('"', "\"\"")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_c0_del_c1_and_line_breaks() {
        assert_eq!(
            terminal("a\x1b]0;t\x07b\x7f\u{9b}c\nd\u{202e}"),
            "a\\x1b]0;t\\x07b\\x7f\\x9bc\\nd\\u{202e}"
        );
        assert!(matches!(terminal("plain é"), Cow::Borrowed(_)));
    }

    #[test]
    fn folded_keeps_one_frame_on_one_line() {
        assert_eq!(folded("f;g\nh 9"), "f:g\\nh 9");
    }

    #[test]
    fn markup_escapes_tags_quotes_and_controls() {
        assert_eq!(
            markup("<!--<script>\"'&\x1b"),
            "&lt;!--&lt;script&gt;&quot;&#39;&amp;\\x1b"
        );
    }

    #[test]
    fn a_document_attribute_keeps_line_breaks_as_references() {
        assert_eq!(
            document_attribute("<script>\nvar a = '&';\t\x1b\"</script>"),
            "&lt;script&gt;&#10;var a = &#39;&amp;&#39;;&#9;\\x1b&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn json_cannot_end_a_script_element() {
        assert_eq!(
            script_json("{\"h\":\"</script><!--\u{2028}\x7f\"}"),
            "{\"h\":\"\\u003c/script\\u003e\\u003c!--\\u2028\\u007f\"}"
        );
    }

    #[test]
    fn json_keeps_template_brackets_readable() {
        assert_eq!(
            json("{\"f\":\"v<int>\u{9b}\"}"),
            "{\"f\":\"v<int>\\u009b\"}"
        );
    }

    #[test]
    fn csv_quotes_and_neutralises_formulas() {
        assert_eq!(csv("plain"), "plain");
        assert_eq!(csv("a,b"), "\"a,b\"");
        assert_eq!(csv("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv("-1"), "\"'-1\"");
        assert_eq!(csv("x\ny"), "x\\ny");
    }
}
