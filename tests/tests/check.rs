//! `vramtrace check` on real runs of the simulated stack: it fails exactly when a limit
//! is broken, by the workloads' own counts, and names the call site that held the most.

use std::process::{Command, Output};
use vramtrace_tests::harness::{python, run_sim, vramtrace, Outcome};

fn check(args: &[&str], run: &Outcome) -> Output {
    // Forced colour would reach a pipe too: the piped checks see vramtrace's own choice.
    Command::new(vramtrace())
        .arg("check")
        .args(args)
        .arg(run.dir.path())
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("vramtrace runs")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn peak(run: &Outcome, workload: &str) -> u64 {
    run.truth(workload)["peak_live_bytes"]["0"]
        .as_u64()
        .unwrap()
}

#[test]
fn check_fails_exactly_when_a_limit_is_broken() {
    let a = run_sim("grow", &["64", "32"], &[], &[]);
    let b = run_sim("grow", &["64", "48"], &[], &[]);
    let held = run_sim("hold", &["1"], &[], &[]);
    for run in [&a, &b, &held] {
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    let p = peak(&a, "grow");

    // The peak: at the limit holds, a byte under it breaks, naming the largest holder.
    let at = p.to_string();
    let under = (p - 1).to_string();
    let out = check(&["--max-peak", &at], &a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = check(&["--max-peak", &under], &a);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let first = text(&out).lines().next().unwrap().to_string();
    assert!(
        first.starts_with("FAIL") && first.contains("load_weights"),
        "{first}"
    );

    // Growth over a baseline, by the workloads' own peaks.
    let growth = (peak(&b, "grow") as f64 - p as f64) * 100.0 / p as f64;
    let base = a.dir.path().to_str().unwrap();
    let above = format!("{}%", growth + 0.01);
    let below = format!("{}%", growth - 0.01);
    let out = check(&["--baseline", base, "--max-growth", &above], &b);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = check(&["--baseline", base, "--max-growth", &below], &b);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("forward_activations"), "{}", text(&out));

    // Leaks: grow frees all it took, hold leaves its memory to the driver.
    let leaked = held.truth("hold")["live_bytes_at_end"]["0"]
        .as_u64()
        .unwrap();
    assert!(leaked > 0);
    assert_eq!(
        a.truth("grow")["live_bytes_at_end"]["0"],
        0,
        "grow frees all it took"
    );
    let out = check(&["--max-leaked", "0"], &a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = check(&["--max-leaked", &(leaked - 1).to_string()], &held);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = check(&["--max-leaked", &leaked.to_string()], &held);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // A GPU the run does not have checks nothing: that is a failure, not a pass.
    let out = check(&["--max-peak", &at, "--device", "7"], &a);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no GPU 7"), "{}", text(&out));

    // No limit at all is a usage error, not a pass.
    assert_eq!(check(&[], &a).status.code(), Some(2));
}

#[test]
fn no_oom_fails_a_run_that_ran_out_and_junit_says_so() {
    let ok = run_sim("grow", &[], &[], &[]);
    let demo = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    let failed: u64 = demo.truth("demo")["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["failed"].as_u64().unwrap())
        .sum();
    assert!(failed > 0);
    assert_eq!(check(&["--no-oom"], &ok).status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("memory.xml");
    let out = check(&["--no-oom", "--junit", junit.to_str().unwrap()], &demo);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("failed allocation"), "{}", text(&out));
    // What the demo still held when it ended on its failed allocation is not a leak (as
    // summary says), so --max-leaked 0 holds.
    let out = check(&["--max-leaked", "0"], &demo);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Valid XML, one failure, as Python's own parser reads it; created 0600.
    let script = "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); \
                  s = d.getElementsByTagName('testsuite')[0]; \
                  print(s.getAttribute('failures'), len(d.getElementsByTagName('failure')))";
    let read = Command::new("python3")
        .args(["-c", script, junit.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), "1 1");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&junit).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Never written over.
    let again = check(&["--no-oom", "--junit", junit.to_str().unwrap()], &demo);
    assert_eq!(again.status.code(), Some(2));
}

/// `script` run by Python in a pseudo-terminal (stdout a terminal): what it printed.
fn on_a_terminal(args: &[&str], env: &[(&str, &str)]) -> String {
    let runner = r#"
import os, subprocess, sys
main, side = os.openpty()
env = dict(os.environ)
# A terminal that takes colour, whatever this test's own environment says.
for k in ("NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"):
    env.pop(k, None)
env["TERM"] = "xterm-256color"
for kv in sys.argv[1].split(";"):
    if kv:
        k, v = kv.split("=", 1)
        env[k] = v
p = subprocess.Popen(sys.argv[2:], stdout=side, stderr=subprocess.DEVNULL, env=env)
os.close(side)
out = b""
while True:
    try:
        chunk = os.read(main, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
p.wait()
sys.stdout.write(out.decode("utf-8", "replace"))
"#;
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let out = Command::new(python())
        .args(["-c", runner, &env.join(";")])
        .arg(vramtrace())
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the pseudo-terminal runner: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn colour_on_a_terminal_only_and_never_under_no_color() {
    let run = run_sim("grow", &[], &[], &[]);
    let dir = run.dir.path().to_str().unwrap();
    let args = ["check", "--max-peak", "1MiB", dir];
    let coloured = on_a_terminal(&args, &[]);
    assert!(coloured.contains("FAIL"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = on_a_terminal(&args, &[("NO_COLOR", "1")]);
    assert!(
        plain.contains("FAIL") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    let piped = check(&["--max-peak", "1MiB"], &run);
    assert!(!text(&piped).contains('\x1b'), "{:?}", text(&piped));
}
