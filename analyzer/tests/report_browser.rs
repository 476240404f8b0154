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

#[test]
fn report_renders_in_headless_chromium_with_the_summary_peak() {
    let Some(browser) = chromium() else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "chromium is not installed: .ci/run installs it (apt-get install -y chromium)"
        );
        eprintln!("skipped: chromium is not installed (not CI)");
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
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
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
    // The script wrote the exact peak from the embedded summary.
    assert!(
        dom.contains(&format!("{peak} bytes (4.0 GiB)")),
        "peak {peak} shown: {dom}"
    );
    assert!(
        dom.contains("<polyline"),
        "the timeline plot is in the page"
    );
    for line in log.lines() {
        assert!(
            !(line.contains("CONSOLE") && line.contains("Uncaught")),
            "a script error was logged: {line}"
        );
    }
}
