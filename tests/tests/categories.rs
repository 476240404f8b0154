//! Categories a C program names itself, with the category ranges of `vramtrace.h`: each
//! category's bytes at the allocated layer's peak are the workload's own, ranges are per
//! thread and nest, and a program that names none has no categories at all.

use serde_json::Value;
use vramtrace_tests::harness::run_sim;

/// Bytes by category name of a `tensor_categories_*` object.
fn split(c: &Value) -> Vec<(String, u64)> {
    c["split"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["category"].as_str().unwrap().to_string(),
                x["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The workload's own bytes by category name, in the views' order.
fn by_category(truth: &Value) -> Vec<(String, u64)> {
    [
        "parameters",
        "gradients",
        "optimizer_state",
        "activations",
        "other",
        "unknown",
    ]
    .iter()
    .map(|c| (c.to_string(), truth[c].as_u64().unwrap()))
    .collect()
}

#[test]
fn a_programs_category_ranges_name_its_tensors_at_the_peak() {
    let run = run_sim("tagged_pool", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.printed("VRAMTRACE_CATEGORIES ");
    let summary = run.summary();
    let device = &summary["processes"][0]["devices"][0];
    let at_peak = &device["tensor_categories_at_peak"];
    assert_eq!(at_peak["known_by"], "annotated", "{at_peak}");
    let want = by_category(&truth);
    assert_eq!(split(at_peak), want);
    // The categories sum to the allocated layer's peak, as the workload held it all then.
    let sum: u64 = want.iter().map(|x| x.1).sum();
    assert_eq!(
        device["peak_requested_bytes"].as_u64(),
        Some(sum),
        "{device}"
    );
    // Everything was given back: nothing of any category at the end.
    let at_end = split(&device["tensor_categories_at_end"]);
    assert!(at_end.iter().all(|x| x.1 == 0), "{at_end:?}");
    // `peak --by category` lists them, largest first.
    let text = run.view(&["peak", "--by", "category"]);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("optimizer state") || l.contains("parameters"))
        .collect();
    assert!(
        rows.len() >= 2 && rows[0].contains("24.0 MiB") && rows[0].contains("optimizer state"),
        "{text}"
    );
}

#[test]
fn a_program_that_names_no_category_has_none() {
    let run = run_sim("caching_pool", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let device = &run.summary()["processes"][0]["devices"][0];
    assert!(device["peak_requested_bytes"].as_u64().unwrap() > 0);
    assert_eq!(device["tensor_categories_at_peak"], Value::Null, "{device}");
}

/// The same from Python: `vramtrace.category` around an allocator's annotations.
#[test]
fn python_names_categories_with_vramtrace_category() {
    let script = r#"
import vramtrace
from annotated_pool import MiB, tensor
with vramtrace.category("parameters"):
    tensor(0, 3 * MiB)
with vramtrace.category("optimizer_state"):
    tensor(3 * MiB, 6 * MiB)
tensor(9 * MiB, MiB)
try:
    vramtrace.category("weights")
    print("no error")
except ValueError as e:
    print("ValueError:", e)
"#;
    let python = vramtrace_tests::harness::python();
    let path = std::env::join_paths([
        vramtrace_tests::pages::root().join("python"),
        vramtrace_tests::harness::script(""),
    ])
    .unwrap();
    let command = [
        python.as_os_str(),
        std::ffi::OsStr::new("-c"),
        std::ffi::OsStr::new(script),
    ];
    let run = vramtrace_tests::harness::run_sim_command(
        &command,
        &["--no-torch"],
        &[("PYTHONPATH", path.to_str().unwrap())],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    assert!(
        String::from_utf8_lossy(&run.output.stdout)
            .contains("ValueError: vramtrace.category: 'weights'"),
        "{}",
        String::from_utf8_lossy(&run.output.stdout)
    );
    let device = &run.summary()["processes"][0]["devices"][0];
    let got = split(&device["tensor_categories_at_peak"]);
    let mib = 1u64 << 20;
    let want: Vec<(String, u64)> = [
        ("parameters", 3 * mib),
        ("gradients", 0),
        ("optimizer_state", 6 * mib),
        ("activations", 0),
        ("other", 0),
        ("unknown", mib),
    ]
    .iter()
    .map(|(c, b)| (c.to_string(), *b))
    .collect();
    assert_eq!(got, want, "{device}");
}

/// A program that allocates from the driver itself, with the same ranges: the reserved
/// layer's peak is split by them, to the workload's own bytes.
#[test]
fn ranges_around_driver_allocations_split_the_reserved_peak() {
    let run = run_sim("tagged_pool", &["device"], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.printed("VRAMTRACE_CATEGORIES ");
    let device = &run.summary()["processes"][0]["devices"][0];
    assert_eq!(device["tensor_categories_at_peak"], Value::Null, "{device}");
    let got = &device["reserved_categories_at_peak"];
    assert_eq!(got["known_by"], "annotated", "{device}");
    let want = by_category(&truth);
    assert_eq!(split(got), want);
    let sum: u64 = want.iter().map(|x| x.1).sum();
    assert_eq!(device["peak_reserved_bytes"].as_u64(), Some(sum));
    let text = run.view(&["summary"]);
    assert!(
        text.contains("the device memory at its peak was (named by the program's category ranges): optimizer state 24.0 MiB"),
        "{text}"
    );
}

/// On a card too small for its last allocation, the post-mortem names what the memory
/// held at the failure was for, to the workload's own bytes then.
#[test]
fn an_out_of_memory_post_mortem_names_the_split_at_the_failure() {
    let run = run_sim(
        "tagged_pool",
        &["device"],
        &["--sim-capacity", "56MiB"],
        &[("VRAMTRACE_SIM_CONTEXT_BYTES", "0")],
    );
    assert_eq!(run.output.status.code(), Some(2), "{}", run.stderr());
    let truth = run.printed("VRAMTRACE_CATEGORIES_BEFORE_LAST ");
    let want = by_category(&truth);
    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    let failure = &oom["failures"][0];
    assert_eq!(split(&failure["reserved_categories"]), want, "{failure}");
    let sum: u64 = want.iter().map(|x| x.1).sum();
    assert_eq!(failure["live_bytes"].as_u64(), Some(sum));
    let summary = run.summary();
    let f = &summary["processes"][0]["failures"][0];
    assert_eq!(split(&f["reserved_categories"]), want, "{f}");
}
