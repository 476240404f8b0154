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

/// Bytes by part name of a `split_at_peak` / `split` object.
fn parts(s: &Value) -> Vec<(String, u64)> {
    s["parts"]
        .as_array()
        .unwrap_or_else(|| panic!("a split: {s}"))
        .iter()
        .map(|x| {
            (
                x["part"].as_str().unwrap().to_string(),
                x["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The workload's own parts, those it holds bytes in, in the views' order, with the
/// context the simulated driver was told to charge.
fn whole_truth(truth: &Value, cache: u64, context: u64) -> Vec<(String, u64)> {
    let mut want = by_category(truth);
    want.push(("allocator_cache".into(), cache));
    want.push(("nccl".into(), truth["nccl"].as_u64().unwrap()));
    want.push(("cublas".into(), truth["cublas"].as_u64().unwrap()));
    let other = truth["other_libraries"].as_u64().unwrap();
    want.push(("other_libraries".into(), other));
    want.push(("context_and_driver".into(), context));
    want.retain(|x| x.1 > 0);
    want
}

#[test]
fn the_whole_device_splits_into_categories_cache_libraries_and_context() {
    const CONTEXT: u64 = 5 << 20;
    let context = CONTEXT.to_string();
    let run = run_sim(
        "tagged_pool",
        &["whole"],
        &[],
        &[
            ("VRAMTRACE_NVML_MS", "20"),
            ("VRAMTRACE_SIM_CONTEXT_BYTES", &context),
        ],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    // The last new segment is the reserved layer's peak.
    let at_peak = run.printed_all("VRAMTRACE_AT_RESERVED_PEAK ");
    let at_peak = at_peak.last().expect("a segment");
    let cache = at_peak["allocator_cache"].as_u64().unwrap();
    let want = whole_truth(at_peak, cache, CONTEXT);
    let summary = run.summary();
    let device = &summary["processes"][0]["devices"][0];
    let split = &device["split_at_peak"];
    assert_eq!(parts(split), want, "{split}");
    assert_eq!(split["known_by"], "annotated");
    // Every part but the context sums to the reserved peak.
    let reserved: u64 = want.iter().map(|x| x.1).sum::<u64>() - CONTEXT;
    assert_eq!(device["peak_reserved_bytes"].as_u64(), Some(reserved));
    assert_eq!(split["reserved_bytes"].as_u64(), Some(reserved));

    // At the failure: every block the workload holds, the rest of its two segments cached.
    let held = run.printed("VRAMTRACE_CATEGORIES ");
    let tensors: u64 = by_category(&held).iter().map(|x| x.1).sum();
    let mut at_failure = held.clone();
    let mut segments = reserved;
    for library in ["nccl", "cublas", "other_libraries"] {
        at_failure[library] = at_peak[library].clone();
        segments -= at_peak[library].as_u64().unwrap();
    }
    let want = whole_truth(&at_failure, segments - tensors, CONTEXT);
    let failure = &summary["processes"][0]["failures"][0];
    assert_eq!(parts(&failure["split"]), want, "{failure}");
    let oom: Value = serde_json::from_str(&run.view(&["oom", "--json"])).unwrap();
    let postmortem = &oom["failures"][0];
    assert_eq!(parts(&postmortem["split"]), want, "{postmortem}");

    // The text says it in one line, with how each part is known.
    let text = run.view(&["summary"]);
    let line = text
        .lines()
        .find(|l| l.starts_with("  at the peak: "))
        .unwrap_or_else(|| panic!("{text}"));
    for words in [
        "parameters 12.0 MiB",
        "NCCL 6.0 MiB",
        "cuBLAS 3.0 MiB",
        "other libraries 2.0 MiB",
        "context and driver 5.0 MiB",
    ] {
        assert!(line.contains(words), "{line}");
    }
    assert!(
        line.contains("libraries by their frames") && line.contains("NVML"),
        "{line}"
    );
    let oom_text = run.view(&["oom"]);
    assert!(oom_text.contains("all of it: "), "{oom_text}");

    // The misspelt range is said to be none, once for its two markers.
    let out = std::process::Command::new(vramtrace_tests::harness::vramtrace())
        .arg("summary")
        .arg(run.dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("category ranges"))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].contains("2 markers") && notes[0].contains("`category:Parameters`"),
        "{stderr}"
    );
}

#[test]
fn a_program_without_libraries_nvml_or_categories_has_no_split() {
    let run = run_sim("tagged_pool", &["device"], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    // Named by its ranges: the split is its categories alone.
    let device = &run.summary()["processes"][0]["devices"][0];
    let split = parts(&device["split_at_peak"]);
    assert!(
        split.iter().all(|x| !matches!(
            x.0.as_str(),
            "nccl" | "cublas" | "allocator_cache" | "context_and_driver"
        )),
        "{split:?}"
    );
    let run = run_sim("runtime_dynamic", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let device = &run.summary()["processes"][0]["devices"][0];
    assert_eq!(device["split_at_peak"], Value::Null, "{device}");
}

/// The most of each category series (`PREFIX` `tensors:` or `reserved:`) of the timeline.
fn category_series_most(timeline: &Value, prefix: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = timeline["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let name = s["layer"].as_str()?.strip_prefix(prefix)?;
            let most = s["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["max_bytes"].as_u64().unwrap())
                .max()
                .unwrap_or(0);
            Some((name.to_string(), most))
        })
        .collect();
    out.sort();
    out
}

/// The workload's own categories that held bytes, by name, sorted.
fn held(truth: &Value) -> Vec<(String, u64)> {
    let mut want: Vec<(String, u64)> = by_category(truth).into_iter().filter(|x| x.1 > 0).collect();
    want.sort();
    want
}

#[test]
fn the_timeline_and_its_plot_stack_the_categories() {
    // Tensors: every block stays live to the end, so each category's most is its end.
    let run = run_sim(
        "tagged_pool",
        &["whole"],
        &[],
        &[("VRAMTRACE_NVML_MS", "20")],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.printed("VRAMTRACE_CATEGORIES ");
    let timeline: Value = serde_json::from_str(&run.view(&["timeline", "--json"])).unwrap();
    assert_eq!(category_series_most(&timeline, "tensors:"), held(&truth));
    assert!(category_series_most(&timeline, "reserved:").is_empty());
    // `--layer allocated` keeps them; `--layer reserved` does not.
    let allocated: Value =
        serde_json::from_str(&run.view(&["timeline", "--json", "--layer", "allocated"])).unwrap();
    assert_eq!(category_series_most(&allocated, "tensors:"), held(&truth));
    let reserved: Value =
        serde_json::from_str(&run.view(&["timeline", "--json", "--layer", "reserved"])).unwrap();
    assert!(category_series_most(&reserved, "tensors:").is_empty());
    // The plot draws one area per category that held bytes, named in its legend.
    let svg = run.dir.path().join("plot.svg");
    run.view(&["timeline", "--svg", svg.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        svg.matches("class=\"vt-area\"").count(),
        held(&truth).len(),
        "{svg}"
    );
    assert!(
        svg.contains("tensors by category") && svg.contains(">optimizer state<"),
        "{svg}"
    );

    // A program without tensors: its reserved layer, by the categories it named.
    let run = run_sim("tagged_pool", &["device"], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.printed("VRAMTRACE_CATEGORIES ");
    let timeline: Value = serde_json::from_str(&run.view(&["timeline", "--json"])).unwrap();
    assert_eq!(category_series_most(&timeline, "reserved:"), held(&truth));
    assert!(category_series_most(&timeline, "tensors:").is_empty());

    // A program that names none has no category series, and its plot no areas.
    let run = run_sim("caching_pool", &[], &[], &[]);
    let timeline: Value = serde_json::from_str(&run.view(&["timeline", "--json"])).unwrap();
    assert!(category_series_most(&timeline, "tensors:").is_empty());
    assert!(category_series_most(&timeline, "reserved:").is_empty());
}

#[test]
fn a_python_programs_own_allocations_through_ctypes_are_not_a_librarys() {
    // python_ctypes.py allocates 1 + 2 + 3 + 4 MiB through ctypes from its own code, and
    // 5 MiB inside libvt_own_thread.so: only those are a library's.
    let python = vramtrace_tests::harness::python();
    let script = vramtrace_tests::harness::script("python_ctypes.py");
    let run = vramtrace_tests::harness::run_sim_command(
        &[python.as_os_str(), script.as_os_str()],
        &[],
        &[],
    );
    assert!(run.output.status.success(), "{}", run.stderr());
    let summary = run.summary();
    let device = &summary["processes"][0]["devices"][0];
    let split = parts(&device["split_at_peak"]);
    let mib = 1u64 << 20;
    assert_eq!(
        split,
        vec![
            ("unknown".to_string(), 10 * mib),
            ("other_libraries".to_string(), 5 * mib)
        ],
        "{device}"
    );
}

#[test]
fn tensors_in_a_librarys_memory_are_tensors_and_the_split_says_what_it_cannot_tell() {
    let run = run_sim("tagged_pool", &["library_pool"], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let truth = run.printed("VRAMTRACE_LIBRARY_POOL ");
    let n = |k: &str| truth[k].as_u64().unwrap();
    let summary = run.summary();
    let split = &summary["processes"][0]["devices"][0]["split_at_peak"];
    let got = parts(split);
    let of = |name: &str| got.iter().find(|x| x.0 == name).map_or(0, |x| x.1);
    assert_eq!(of("activations"), n("activations"), "{split}");
    assert_eq!(of("parameters"), n("parameters"), "{split}");
    // Every part sums to the reserved layer, the tensors counted once.
    assert_eq!(
        got.iter().map(|x| x.1).sum::<u64>(),
        n("reserved"),
        "{split}"
    );
    // The tensors beyond what the program reserved itself were in the library's memory.
    let beyond = n("activations") + n("parameters") - n("own");
    assert_eq!(
        split["tensors_in_libraries"].as_u64(),
        Some(beyond),
        "{split}"
    );
    let text = run.view(&["summary"]);
    assert!(text.contains("exact together, not each"), "{text}");
}
