//! The HTML report opened in a real headless browser (Debian's chromium, installed by
//! .ci/run): it renders, its script shows the peak figure of `summary --json`, and it
//! records no script error. Under CI=true a missing chromium is a failure, not a skip.

mod common;
use common::*;
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
fn browser() -> Option<&'static str> {
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

/// The DOM chromium built from `html` after its scripts ran, and chromium's log; the
/// script must have run to its end without an error.
fn rendered(browser: &str, html: &std::path::Path) -> (String, String) {
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
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "chromium failed ({}; 124 or 137: timed out): {log}",
        out.status
    );
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
    (dom, log)
}

#[test]
fn report_renders_in_headless_chromium_with_the_summary_peak() {
    let Some(browser) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    // 3 GiB then 1 GiB more, 3 GiB freed: the peak is 4 GiB at 20 ms.
    write_trace(
        &traces,
        "vramtrace-h-10.jsonl",
        &[
            header(10, "h", S, 1_700_000_000 * S, Some("0")),
            alloc(10 * MS, 0, "cudaMalloc", 0x1000, 3 * GIB),
            alloc(20 * MS, 0, "cuMemAlloc_v2", 0x2000, GIB),
            free(30 * MS, 0, "cudaFree", 0x1000),
            failed(40 * MS, 0, "cudaMalloc", 8 * GIB),
            end(50 * MS, 4),
        ],
    );
    let t = traces.to_str().unwrap();
    let (summary, _, _) = json_view(&["summary", "--json", t]);
    let peak = summary["devices"][0]["peak_reserved_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(peak, 4 * GIB);
    let html = dir.path().join("report.html");
    let out = vramtrace(&["report", "-o", html.to_str().unwrap(), t]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("src=\"http") && !page.contains("href=\"http"),
        "nothing is fetched (namespace URIs of the SVG are names, not fetches)"
    );

    let (dom, _) = rendered(browser, &html);
    // The script wrote the exact peak from the embedded summary.
    assert!(
        dom.contains(&format!("{peak} bytes (4.0 GiB)")),
        "peak {peak} shown: {dom}"
    );
    assert!(
        dom.contains("<polyline"),
        "the timeline plot is in the page"
    );
}

/// Hostile hosts, GPU labels and frames (`<!--<script>` among them) leave the page one
/// document: its script runs and sees both GPUs' peaks, every section is in the DOM,
/// and no element came from the trace.
#[test]
fn a_hostile_trace_leaves_the_report_whole_in_chromium() {
    let Some(browser) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    write_hostile_run(&traces);
    let html = dir.path().join("report.html");
    vramtrace_ok(&[
        "report",
        "-o",
        html.to_str().unwrap(),
        traces.to_str().unwrap(),
    ]);
    let (dom, _) = rendered(browser, &html);
    // Host evil's peak: 3 GiB; the other host's: 512 MiB, written by the script.
    assert!(dom.contains("3221225472 bytes (3.0 GiB)"), "{dom}");
    assert!(dom.contains("536870912 bytes (512.0 MiB)"), "{dom}");
    // Processes, a section per GPU (2), who held the peak, failed allocations, never freed.
    assert_eq!(dom.matches("<h2>").count(), 6, "{dom}");
    assert_eq!(dom.matches("<script").count(), 2, "the report's own: {dom}");
    assert!(!dom.contains("alert(1)</script>"), "{dom}");
}
