//! Colour for the text views on a terminal: a verdict that failed in red, one that held in
//! green. The codes are written around text already escaped for the terminal; the command
//! prints through `anstream`, which drops them unless stdout is a terminal, and always
//! under `NO_COLOR` (no-color.org) or `CLICOLOR=0`, so pipes and files get plain text.

use anstyle::{AnsiColor, Style};

const BAD: Style = AnsiColor::Red.on_default().bold();
const GOOD: Style = AnsiColor::Green.on_default();

fn styled(style: Style, s: &str) -> String {
    format!("{}{s}{}", style.render(), style.render_reset())
}

/// Something that went wrong: a broken limit, an out-of-memory error, a higher peak.
pub fn bad(s: &str) -> String {
    styled(BAD, s)
}

/// Something that held.
pub fn good(s: &str) -> String {
    styled(GOOD, s)
}
