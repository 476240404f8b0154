//! Secrets in the command line of a trace written before redaction (or by another
//! writer) reach no view, export or report: the header is redacted as it is read.

mod common;
use common::*;

#[test]
fn secrets_in_an_older_trace_reach_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    // Its argv holds `--hf-token=hf_SECRETvalue --password hunter2`.
    write_hostile_run(&traces);
    let raw = std::fs::read_to_string(traces.join("vramtrace-evil-100.jsonl")).unwrap();
    assert!(
        raw.contains("hf_SECRETvalue") && raw.contains("hunter2"),
        "the control"
    );
    let t = traces.to_str().unwrap();
    let html = dir.path().join("report.html");
    let views: &[&[&str]] = &[
        &["summary", t],
        &["summary", "--json", t],
        &["export", "--format", "perfetto", t],
        &["report", "-o", html.to_str().unwrap(), t],
    ];
    for args in views {
        let out = vramtrace_ok(args);
        let text = match args[0] {
            "report" => std::fs::read_to_string(&html).unwrap(),
            _ => String::from_utf8_lossy(&out.stdout).into_owned(),
        };
        assert!(text.contains("--password"), "{args:?}: the option is shown");
        assert!(!text.contains("hf_SECRETvalue"), "{args:?}");
        assert!(!text.contains("hunter2"), "{args:?}");
    }
}
