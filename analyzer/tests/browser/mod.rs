//! The HTML report in a real headless browser (Debian's chromium, installed by .ci/run),
//! shared by the analyzer's report tests and the end-to-end ones (tests/tests/
//! report_browser.rs includes this file): the page opened at 1366x768 with `#selftest`,
//! whose script checks the first screen, hovers and clicks each plot and writes what it
//! found into `#vt-selftest`; a screenshot kept under the test's target directory. Under
//! CI=true a missing chromium is a failure, not a skip.
#![allow(dead_code)] // each test file uses its own part

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// The browser, or None (and a note) outside CI when there is none.
pub fn browser() -> Option<&'static str> {
    let found = chromium();
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "chromium is not installed: .ci/run installs it (apt-get install -y chromium)"
        );
        eprintln!("skipped: chromium is not installed (not CI)");
    }
    found
}

/// chromium on `url` with `args`, at a laptop's screen size; its stdout and log.
fn chromium_run(browser: &str, url: &str, args: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    // Under coreutils' timeout, which signals chromium's whole process group: a browser
    // that hangs (waiting for a bus, a GPU process) fails the test instead of stalling CI.
    let out = Command::new("timeout")
        .args(["--kill-after=10s", "120s", browser])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1366,768",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "chromium failed ({}; 124 or 137: timed out): {log}",
        out.status
    );
    (stdout, log)
}

/// What the browser made of a report.
pub struct Checked {
    /// The DOM after the page's script and its self-check ran.
    pub dom: String,
    /// What the self-check wrote: `verdict`, `verdict_on_first_screen`, per device the
    /// hover read-out and the live set a click showed (see report.js).
    pub selftest: Value,
    pub screenshot: PathBuf,
}

/// The text of element `id` in a dumped DOM (`<pre id="...">TEXT</pre>`), unescaped.
fn text_of(dom: &str, id: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let start = at + dom[at..].find('>')? + 1;
    let end = start + dom[start..].find("</pre>")?;
    Some(
        dom[start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&nbsp;", "\u{a0}")
            .replace("&amp;", "&"),
    )
}

/// Opens `html` with `#selftest`, checks its script ran to its end with no error, and
/// takes a 1366x768 screenshot named `name` (its path printed: look at it).
pub fn check(browser: &str, html: &Path, name: &str) -> Checked {
    let url = format!("file://{}#selftest", html.display());
    let (dom, log) = chromium_run(browser, &url, &["--dump-dom"]);
    assert!(
        dom.contains("id=\"vt-rendered\""),
        "the report's script ran to its end: {dom}\n{log}"
    );
    assert!(!dom.contains("id=\"vt-error\""), "script error: {dom}");
    for line in log.lines() {
        assert!(
            !(line.contains("CONSOLE") && line.contains("Uncaught")),
            "a script error was logged: {line}"
        );
    }
    let selftest = text_of(&dom, "vt-selftest").expect("the self-check wrote its findings");
    let selftest: Value = serde_json::from_str(&selftest).expect("the self-check wrote JSON");
    assert_eq!(selftest["errors"], serde_json::json!([]), "{selftest}");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let screenshot = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&screenshot);
    let shot = format!("--screenshot={}", screenshot.display());
    chromium_run(browser, &format!("file://{}", html.display()), &[&shot]);
    assert!(
        std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot of {name}"
    );
    eprintln!(
        "screenshot: {}\nself-check: {selftest}",
        screenshot.display()
    );
    Checked {
        dom,
        selftest,
        screenshot,
    }
}

/// The first screen says what happened and shows the plot under it; each plot answers
/// a hover with the time and every layer's bytes and a click with a live set.
pub fn assert_first_screen_and_interaction(c: &Checked, devices: usize) {
    let s = &c.selftest;
    assert_eq!(s["verdict_on_first_screen"], true, "{s}");
    assert_eq!(s["plot_on_first_screen"], true, "{s}");
    assert_eq!(s["plot_below_verdict"], true, "{s}");
    let shown = s["devices"].as_array().expect("devices");
    assert_eq!(shown.len(), devices, "{s}");
    for d in shown {
        let hover = d["hover"].as_str().unwrap_or("");
        assert!(
            hover.starts_with("at ") && hover.contains("reserved"),
            "{d}"
        );
        let title = d["click_title"].as_str().unwrap_or("");
        assert!(title.contains(" live at "), "{d}");
        // The middle of a plot may come after its processes ended (ranks of unequal
        // length): nothing live is an answer too, and the peak's set has its rows.
        assert!(
            d["click_rows"].as_u64().unwrap_or(0) >= 1 || title.starts_with("0 B live"),
            "{d}"
        );
        assert!(d["peak_rows"].as_u64().unwrap_or(0) >= 1, "{d}");
        assert_brush(d);
    }
}

/// Brushing the left half of a plot zooms its time axis in (the axis's labels change,
/// the window ends before the run does); the click ending the brush asks for no live
/// set, a click inside the window answers one, and a double-click zooms back out to the
/// axis drawn at first. A timeless snapshot (one moment) has no time to zoom into.
fn assert_brush(d: &Value) {
    assert_eq!(
        d["reset_axis"], d["axis"],
        "zoomed out to the axis drawn: {d}"
    );
    assert_eq!(d["zoom_out_hidden"], true, "{d}");
    let timeless = d["axis"].as_array().is_some_and(|a| a.len() == 1);
    if timeless {
        assert_eq!(d["zoom_axis"], d["axis"], "{d}");
        return;
    }
    assert_eq!(d["brush_click_ignored"], true, "{d}");
    assert_ne!(d["zoom_axis"], d["axis"], "the axis changed: {d}");
    assert_eq!(d["zoom_out_shown"], true, "{d}");
    let end = d["reset_window"][1].as_f64().unwrap_or(0.0);
    let zoomed = d["zoom_window"][1].as_f64().unwrap_or(end);
    assert!(
        zoomed < end * 0.6 && zoomed > end * 0.4,
        "the left half: {d}"
    );
    let title = d["zoom_click_title"].as_str().unwrap_or("");
    assert!(
        title.contains(" live at ") || title.starts_with("Nothing was live yet"),
        "a click after the zoom answers: {d}"
    );
}

/// `1.5 GiB`, `512 B`: the units the page shows (units::bytes, report.js's `bin`).
pub fn binary(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}
