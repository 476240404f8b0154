//! `vramtrace diff` on real runs of the simulated stack: one workload run twice with one
//! allocation made larger, and the difference named at that call site, to the byte, by
//! the workload's own counts.

use serde_json::Value;
use std::process::Command;
use vramtrace_tests::harness::{run_sim, vramtrace, Outcome};

/// `vramtrace ARGS... A B`, which must succeed: its stdout.
fn diff(args: &[&str], a: &Outcome, b: &Outcome) -> String {
    let out = Command::new(vramtrace())
        .arg("diff")
        .args(args)
        .arg(a.dir.path())
        .arg(b.dir.path())
        .output()
        .expect("vramtrace runs");
    assert!(
        out.status.success(),
        "vramtrace diff: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The workload's own peak on device 0.
fn peak(run: &Outcome) -> u64 {
    run.truth("grow")["peak_live_bytes"]["0"].as_u64().unwrap()
}

/// Whether a group's frames name `function`.
fn names(group: &Value, function: &str) -> bool {
    group["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"] == function)
}

#[test]
fn a_larger_allocation_is_named_at_its_call_site_with_its_exact_difference() {
    let a = run_sim("grow", &["64", "32"], &[], &[]);
    let b = run_sim("grow", &["64", "48"], &[], &[]);
    for run in [&a, &b] {
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    let grown = i128::from(peak(&b)) - i128::from(peak(&a));
    assert!(grown > 0);

    let v: Value = serde_json::from_str(&diff(&["--json"], &a, &b)).unwrap();
    assert_eq!(v["layer"], "reserved");
    let d = &v["devices"][0];
    assert_eq!(d["a"]["peak_bytes"], peak(&a));
    assert_eq!(d["b"]["peak_bytes"], peak(&b));
    assert_eq!(
        d["difference"]["peak_bytes"].as_i64().map(i128::from),
        Some(grown)
    );
    let groups = d["groups"].as_array().unwrap();
    let top = &groups[0];
    assert!(names(top, "forward_activations"), "{top}");
    assert_eq!(top["change"], "grown");
    assert_eq!(
        top["difference_bytes"].as_i64().map(i128::from),
        Some(grown)
    );
    let weights: Vec<&Value> = groups.iter().filter(|g| names(g, "load_weights")).collect();
    assert_eq!(weights.len(), 1, "{groups:?}");
    assert_eq!(weights[0]["change"], "same");
    assert_eq!(weights[0]["difference_bytes"], 0);

    let text = diff(&[], &a, &b);
    let first = text.lines().next().unwrap();
    assert!(
        first.contains("higher") && first.contains("forward_activations"),
        "{text}"
    );

    // A against itself: no difference anywhere.
    let same: Value = serde_json::from_str(&diff(&["--json"], &a, &a)).unwrap();
    let d = &same["devices"][0];
    assert_eq!(d["difference"]["peak_bytes"], 0);
    assert!(d["groups"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["change"] == "same" && g["difference_bytes"] == 0));
}

/// Phase by phase: `grow` loads its weights in a phase "load" and makes its activations in
/// each of three phases "forward"; with activations of 32 MiB in A and 48 MiB in B, each
/// forward's peak is 16 MiB higher in B (the weights held beside it), and the load's the
/// same. The sizes are the workload's arguments.
#[test]
fn phases_are_compared_by_name_and_occurrence_with_their_exact_difference() {
    const MIB: u64 = 1 << 20;
    let a = run_sim("grow", &["64", "32", "3"], &[], &[]);
    let b = run_sim("grow", &["64", "48", "3"], &[], &[]);
    for run in [&a, &b] {
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    let v: Value = serde_json::from_str(&diff(&["--json"], &a, &b)).unwrap();
    let got: Vec<(String, u64, u64, u64, i64)> = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["occurrence"].as_u64().unwrap(),
                p["a_peak_bytes"].as_u64().unwrap(),
                p["b_peak_bytes"].as_u64().unwrap(),
                p["difference_bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    let forward = |n| ("forward".to_string(), n, 96 * MIB, 112 * MIB, 16 << 20);
    assert_eq!(
        got,
        [
            ("load".to_string(), 1, 64 * MIB, 64 * MIB, 0),
            forward(1),
            forward(2),
            forward(3),
        ]
    );
    let text = diff(&[], &a, &b);
    assert!(
        text.contains("+16.0 MiB  forward #1: 112.0 MiB against 96.0 MiB"),
        "{text}"
    );
    assert!(text.contains("1 phase the same in both"), "{text}");

    // A against itself: every phase the same.
    let same: Value = serde_json::from_str(&diff(&["--json"], &a, &a)).unwrap();
    let phases = same["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 4);
    assert!(
        phases.iter().all(|p| p["difference_bytes"] == 0),
        "{phases:?}"
    );
}

/// The JSON a report page embeds for its script (`<script id="vt-data">`).
fn embedded(page: &str) -> Value {
    let start = page
        .find("id=\"vt-data\">")
        .expect("the page embeds its data")
        + 13;
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

#[test]
fn report_with_a_baseline_draws_both_runs_and_says_what_grew() {
    let a = run_sim("grow", &["64", "32"], &[], &[]);
    let b = run_sim("grow", &["64", "48"], &[], &[]);
    for run in [&a, &b] {
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.html");
    let out = Command::new(vramtrace())
        .args(["report", "-o"])
        .arg(&page)
        .arg("--baseline")
        .arg(a.dir.path())
        .arg(b.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&page).unwrap();

    // Both runs' reserved lines on GPU 0's plot, each reaching its workload's own peak.
    let data = embedded(&page);
    let lines = data["devices"][0]["lines"].as_array().unwrap();
    let most = |name: &str| {
        let line = lines
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("a line {name:?} in {lines:?}"));
        line["b"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .max()
    };
    assert_eq!(most("reserved"), Some(peak(&b)));
    assert_eq!(most("reserved, baseline"), Some(peak(&a)));

    // The verdict against the baseline, by the workloads' own figures.
    let mib = |n: u64| format!("{:.1} MiB", n as f64 / (1 << 20) as f64);
    let want = format!(
        "GPU 0: B&#39;s peak is {} (17%) higher than A&#39;s: {} against {}",
        mib(peak(&b) - peak(&a)),
        mib(peak(&b)),
        mib(peak(&a))
    );
    let section = &page[page.find("id=\"vt-baseline\"").expect("a baseline section")..];
    assert!(
        section.contains(&want),
        "{want:?} in {}",
        &section[..section.len().min(2000)]
    );
    assert!(
        section.contains("forward_activations"),
        "{}",
        &section[..600]
    );
    // Without --baseline the page has neither.
    let plain = dir.path().join("plain.html");
    let out = Command::new(vramtrace())
        .args(["report", "-o"])
        .arg(&plain)
        .arg(b.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let plain = std::fs::read_to_string(&plain).unwrap();
    assert!(!plain.contains("vt-baseline") && !plain.contains("reserved, baseline"));
}
