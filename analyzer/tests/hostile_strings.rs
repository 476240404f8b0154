//! A trace written to break its reader's outputs (common::write_hostile_run: every string
//! a trace carries holds terminal escapes, line breaks, `;`, `<!--<script>` and a
//! formula) through every view and output format.
//!
//! GIVEN host `evil` holding 1 GiB (stack main > alloc_a) and 2 GiB (main > alloc_b) at its
//! peak, and host `=HYPERLINK(..)` holding 512 MiB (main > alloc_a), nothing freed:
//! the flamegraph of the peak has 3 stacks, the leaks flamegraph 3 too.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

fn hostile_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    write_hostile_run(&traces);
    dir
}

fn no_raw_controls(what: &str, out: &[u8]) {
    let found = raw_controls(out);
    assert!(
        found.is_empty(),
        "{what}: raw control bytes {:?} in:\n{}",
        &found[..found.len().min(8)],
        String::from_utf8_lossy(out)
    );
}

/// Every view's stdout and stderr, text and JSON: no byte a terminal acts on.
#[test]
fn no_view_writes_a_raw_control_character() {
    let dir = hostile_dir();
    let t = dir.path().join("traces");
    let t = t.to_str().unwrap();
    let views: &[&[&str]] = &[
        &["summary", t],
        &["summary", "--json", t],
        &["--full-stack", "peak", t],
        &["peak", "--json", t],
        &["--full-stack", "leaks", t],
        &["leaks", "--json", t],
        &["--full-stack", "oom", t],
        &["oom", "--json", t],
        &["timeline", t],
        &["timeline", "--json", t],
        &["export", "--format", "csv", t],
        &["export", "--format", "perfetto", t],
        &["flamegraph", "--folded", "-o", "-", t],
        &["flamegraph", "-o", "-", t],
    ];
    for args in views {
        let out = vramtrace(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        no_raw_controls(&format!("{args:?} stdout"), &out.stdout);
        no_raw_controls(&format!("{args:?} stderr"), &out.stderr);
        if args.contains(&"--json") || args.contains(&"perfetto") {
            let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&out.stdout);
            assert!(parsed.is_ok(), "{args:?}: not JSON: {parsed:?}");
        }
    }
}

/// Folded stacks: one line per stack (3 at the peak, 3 never freed), each `frames bytes`
/// with the bytes of the hand-written trace; a name's `;` and line break forge nothing.
#[test]
fn folded_stacks_keep_one_line_per_stack() {
    let dir = hostile_dir();
    let t = dir.path().join("traces");
    let t = t.to_str().unwrap();
    for extra in [&[][..], &["--leaks"][..]] {
        let mut args = vec!["flamegraph", "--folded", "-o", "-"];
        args.extend(extra);
        args.push(t);
        let out = vramtrace_ok(&args);
        let text = String::from_utf8(out.stdout).unwrap();
        let mut counts: Vec<u64> = text
            .lines()
            .map(|l| {
                let (stack, count) = l.rsplit_once(' ').unwrap();
                assert_eq!(
                    stack.matches(';').count(),
                    if extra.is_empty() { 4 } else { 3 },
                    "`host GPU;pid;main;alloc;api` (leaks: no host part): {l}"
                );
                count.parse().unwrap()
            })
            .collect();
        counts.sort();
        assert_eq!(counts, [512 * MIB, GIB, 2 * GIB], "{extra:?}:\n{text}");
    }
}

/// Python's own XML parser reads each SVG (control characters are not allowed in XML,
/// and a raw `<` would open an element).
fn parses_as_xml(path: &Path) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); print(r.tag)",
        ])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "{http://www.w3.org/2000/svg}svg"
    );
}

#[test]
fn svg_outputs_are_well_formed_xml() {
    let dir = hostile_dir();
    let t = dir.path().join("traces");
    let t = t.to_str().unwrap();
    let timeline = dir.path().join("timeline.svg");
    vramtrace_ok(&["timeline", "--svg", timeline.to_str().unwrap(), t]);
    parses_as_xml(&timeline);
    let flame = dir.path().join("flame.svg");
    vramtrace_ok(&["flamegraph", "-o", flame.to_str().unwrap(), t]);
    parses_as_xml(&flame);
}

/// Python's csv module reads the timeline's CSV as a table of 10 columns, and no field
/// starts a spreadsheet formula.
#[test]
fn csv_fields_are_quoted_and_hold_no_formula() {
    let dir = hostile_dir();
    let t = dir.path().join("traces");
    let csv = vramtrace_ok(&["timeline", t.to_str().unwrap()]).stdout;
    let out = Command::new("python3")
        .args([
            "-c",
            "import csv, sys\n\
             rows = list(csv.reader(sys.stdin))\n\
             assert {len(r) for r in rows} == {10}, rows\n\
             bad = [f for r in rows for f in r if f[:1] in ('=', '+', '-', '@')]\n\
             assert not bad, bad\n\
             print(len(rows), sorted({r[2] for r in rows[1:]}))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(&csv)?;
            child.wait_with_output()
        })
        .expect("python3 runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("'=HYPERLINK(\"http://x\")"),
        "the host, neutralised: {said}"
    );
}

/// The report is one document: its own two scripts and nothing else opens one, no
/// comment is opened, every section is there, and the page ends.
#[test]
fn the_report_stays_one_document() {
    let dir = hostile_dir();
    let t = dir.path().join("traces");
    let html = dir.path().join("report.html");
    vramtrace_ok(&["report", "-o", html.to_str().unwrap(), t.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    no_raw_controls("report", page.as_bytes());
    assert_eq!(page.matches("<script").count(), 2, "the report's own");
    assert_eq!(page.matches("</script>").count(), 2);
    assert!(!page.contains("<!--"));
    // One per GPU (2), ranks (two processes of rank "0..."), failed allocations, who held
    // the peak, held at the end, processes.
    assert_eq!(page.matches("<h2>").count(), 7);
    assert!(page.trim_end().ends_with("</body></html>"));
}
