//! `check` as text (one line a limit, the broken ones first) and as JUnit XML, which CI
//! systems (GitLab, Jenkins, GitHub's test reporters) show as test results.

use super::escape::{markup, terminal as t};
use crate::views::check::CheckView;
use std::fmt::Write;

pub fn text(v: &CheckView) -> String {
    let mut o = String::new();
    let mut checks: Vec<_> = v.checks.iter().collect();
    checks.sort_by_key(|c| !c.broken);
    for c in checks {
        let status = if c.broken {
            super::style::bad("FAIL")
        } else {
            super::style::good("ok  ")
        };
        let _ = writeln!(o, "{status} {}", t(&c.message));
    }
    let n = crate::units::count(v.checks.len() as u64, "limit");
    let _ = match v.broken {
        0 => writeln!(o, "held: {n}"),
        b => writeln!(o, "broken: {b} of {n}"),
    };
    o
}

/// One test suite, one test case a limit (on a GPU), a `<failure>` for each broken one.
pub fn junit(v: &CheckView) -> String {
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        o,
        "<testsuites><testsuite name=\"vramtrace check\" tests=\"{}\" failures=\"{}\">",
        v.checks.len(),
        v.broken
    );
    for c in &v.checks {
        let name = match &c.gpu {
            Some(gpu) => format!("{} {gpu}", c.limit),
            None => c.limit.to_string(),
        };
        let _ = write!(
            o,
            "<testcase classname=\"vramtrace.check\" name=\"{}\">",
            markup(&name)
        );
        if c.broken {
            let _ = write!(
                o,
                "<failure message=\"{}\">{}</failure>",
                markup(&c.message),
                markup(&c.message)
            );
        } else {
            let _ = write!(o, "<system-out>{}</system-out>", markup(&c.message));
        }
        let _ = writeln!(o, "</testcase>");
    }
    o.push_str("</testsuite></testsuites>\n");
    o
}
