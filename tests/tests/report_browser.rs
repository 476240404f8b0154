//! `vramtrace report` on real runs of the simulated stack, opened in headless Chromium
//! (the analyzer's tests/browser/mod.rs): the demo running out of memory, two ranks on
//! two GPUs both failing, and a caching allocator with markers and NVML samples. Figures
//! on the page are compared with what each workload printed of itself.

#[path = "../../analyzer/tests/browser/mod.rs"]
mod browser;

use browser::*;
use std::ffi::OsStr;
use std::path::PathBuf;
use vramtrace_tests::harness::{run_sim, run_sim_command, workload, Outcome};

const MAX_PAGE: u64 = 5 << 20;

/// The report of `run`, written beside its traces; its size checked against the bound.
fn report(run: &Outcome) -> PathBuf {
    let html = run.dir.path().join("report.html");
    run.view(&["report", "-o", html.to_str().expect("a UTF-8 path")]);
    let size = std::fs::metadata(&html).unwrap().len();
    assert!(size <= MAX_PAGE, "{size} bytes");
    eprintln!("report: {} ({size} bytes)", html.display());
    html
}

fn verdict(c: &Checked) -> &str {
    c.selftest["verdict"].as_str().unwrap_or("")
}

fn peak_titles(c: &Checked) -> Vec<String> {
    c.selftest["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["peak_title"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_demo_report_says_out_of_memory_first_with_the_workloads_figures() {
    let Some(browser) = browser() else {
        return;
    };
    let run = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    let truth = run.truth("demo");
    let peak = truth["peak_live_bytes"]["0"].as_u64().unwrap();
    let held = truth["live_bytes_at_end"]["0"].as_u64().unwrap();
    let total = truth["meminfo"][0]["total"].as_u64().unwrap();
    let c = check(browser, &report(&run), "demo");
    assert_first_screen_and_interaction(&c, 1);
    let v = verdict(&c);
    // The demo exits right after its failure without freeing: what it held then is
    // what it held at the end.
    let failed = format!("holding {} of its {}.", binary(held), binary(total));
    assert!(v.starts_with("Out of memory: cudaMalloc of "), "{v}");
    assert!(v.contains(&failed), "{failed} in {v}");
    assert!(
        v.contains(&format!("The peak: {} of {}", binary(peak), binary(total))),
        "{v}"
    );
    let died = format!("Nothing leaked; {} was still live when", binary(held));
    assert!(v.contains(&died), "{died} in {v}");
    assert!(peak_titles(&c)[0].starts_with(&format!("peak: {} live", binary(peak))));
    // The y-axis reaches past the peak and the capacity: 24 GiB is on it, not above it.
    assert!(
        c.dom
            .contains(&format!("capacity {}</text>", binary(total))),
        "capacity line"
    );
    assert!(!c.dom.contains("above the scale"), "nothing clipped");
}

#[test]
fn a_run_of_two_ranks_has_a_section_per_rank_a_rank_table_and_each_failure_where_it_was() {
    let Some(browser) = browser() else {
        return;
    };
    let demo = workload("demo");
    let demo = demo.to_str().unwrap();
    // Rank 1 on GPU 1 of a 16 GiB card, rank 0 on GPU 0 of a 24 GiB one: each runs out.
    let script = format!(
        "RANK=0 WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=0 {demo} & \
         RANK=1 WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=1 VRAMTRACE_SIM_CAPACITY={} {demo}; wait",
        16u64 << 30
    );
    let command = [OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)];
    let run = run_sim_command(&command, &["--sim-capacity", "24GiB"], &[]);
    let summary = run.summary();
    let rank_of = |pid: u64| {
        summary["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .and_then(|p| p["rank"].as_str())
            .map(str::to_string)
    };
    let peaks: Vec<(String, u64)> = run
        .truths
        .iter()
        .filter(|t| t["workload"] == "demo")
        .map(|t| {
            let rank = rank_of(t["pid"].as_u64().unwrap()).expect("a rank");
            (rank, t["peak_live_bytes"]["0"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(peaks.len(), 2, "{:?}", run.truths);
    let c = check(browser, &report(&run), "ranks");
    assert_first_screen_and_interaction(&c, 2);
    let v = verdict(&c);
    assert!(v.contains("2 allocations failed in all."), "{v}");
    let highest = peaks.iter().map(|p| p.1).max().unwrap();
    assert!(
        v.contains(&format!("The highest peak of 2 GPUs: {}", binary(highest))),
        "{v}"
    );
    // GPU i is rank i's (CUDA_VISIBLE_DEVICES): its peak is that rank's.
    let titles = peak_titles(&c);
    for (rank, peak) in &peaks {
        let i: usize = rank.parse().unwrap();
        assert!(
            titles[i].starts_with(&format!("peak: {} live", binary(*peak))),
            "{titles:?}"
        );
    }
    // A section per rank and its GPU, in rank order.
    for rank in ["0", "1"] {
        let heading = format!("<h2>Rank {rank} · GPU {rank}</h2>");
        assert!(c.dom.contains(&heading), "{heading}");
    }
    assert!(c.dom.contains("<section id=\"vt-ranks\">"), "a rank table");
    let table = &c.dom[c.dom.find("id=\"vt-ranks\"").unwrap_or(0)..];
    let table = &table[..table.find("</table>").unwrap_or(0)];
    assert_eq!(
        table.matches("<tr").count(),
        3,
        "a heading and a row per rank: {table}"
    );
    // Rank 1's failure is on GPU 1, which it calls its device 0.
    assert!(
        c.dom.contains("on GPU 1 at "),
        "rank 1's failure under GPU 1"
    );
    assert!(
        c.dom.contains("(rank 1) asked for it on its device 0"),
        "{}",
        c.dom
    );
}

/// The caching pool: markers `model`, `step` and `pause`, an allocated layer of
/// annotated blocks, NVML samples far above the rest (the simulated context), and
/// tensors it never gives back.
#[test]
fn a_caching_allocator_run_shows_its_markers_layers_and_leaked_tensors() {
    let Some(browser) = browser() else {
        return;
    };
    let context = (123u64 << 20).to_string();
    let env = [
        ("VRAMTRACE_NVML_MS", "20"),
        ("VRAMTRACE_SIM_CONTEXT_BYTES", context.as_str()),
    ];
    let run = run_sim("caching_pool", &[], &[], &env);
    assert!(run.output.status.success(), "{}", run.stderr());
    let pool = run.printed("VRAMTRACE_POOL ");
    let c = check(browser, &report(&run), "caching-pool");
    assert_first_screen_and_interaction(&c, 1);
    let v = verdict(&c);
    let leaked = pool["requested_end"].as_u64().unwrap();
    assert!(
        v.starts_with(&format!("Leaked: {} in ", binary(leaked))),
        "{v}"
    );
    let requested_peak = pool["requested_peak"].as_u64().unwrap();
    let tensors = format!("({} in tensors at their own peak)", binary(requested_peak));
    assert!(v.contains(&tensors), "{tensors} in {v}");
    for name in ["model", "step", "pause"] {
        assert!(
            c.dom.contains(&format!("marker {name} (pid")),
            "marker {name}"
        );
    }
    let hover = c.selftest["devices"][0]["hover"].as_str().unwrap();
    assert!(
        hover.contains("device (NVML)") && hover.contains("allocated"),
        "{hover}"
    );
    // Its work is all in its first milliseconds, then it waits for NVML's samples (at
    // the default 1 s, for seconds): drawn whole, the markers `model` and `step` crowd
    // the left edge; zoomed to twice the peak's time, they stand far apart.
    let d = &c.selftest["devices"][0];
    let x_of = |key: &str, name: &str| {
        d[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| {
                m[0].as_str()
                    .unwrap()
                    .starts_with(&format!("marker {name} "))
            })
            .and_then(|m| m[1].as_f64())
    };
    let gap = |key| x_of(key, "step").unwrap() - x_of(key, "model").unwrap();
    assert!(
        gap("peak_zoom_markers") > 5.0 * gap("markers").max(1.0),
        "apart once zoomed: {d}"
    );
    // NVML counts the context: drawn clipped, said so, the other layers keep their scale.
    assert!(c.dom.contains("clipped at the top"), "the NVML note");
    assert!(peak_titles(&c)[0].contains("tensors (requested bytes)"));
}

/// A run with PyTorch's snapshot beside its trace (as the startup hook writes it): the
/// snapshot's tensors are the process's allocated line, on the run's clock, and the hover
/// reads them.
#[test]
fn a_snapshot_beside_the_trace_joins_the_reports_plot() {
    let Some(browser) = browser() else {
        return;
    };
    let run = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    let header = &run.traces[0].header;
    // 512 MiB of tensors allocated 1 ms into the run and still live at the dump.
    let script = r#"
import pickle, sys
M = 1 << 20
t = int(sys.argv[2]) // 1000 + 1000
block = {"address": 1 << 40, "size": 512 * M, "requested_size": 512 * M, "state": "active_allocated"}
segment = {"device": 0, "address": 1 << 40, "total_size": 512 * M, "stream": 0,
           "segment_type": "large", "frames": [], "blocks": [block]}
alloc = {"action": "alloc", "addr": 1 << 40, "size": 512 * M, "stream": 0, "time_us": t, "frames": []}
pickle.dump({"segments": [segment], "device_traces": [[alloc]]}, open(sys.argv[1], "wb"), protocol=4)
"#;
    run.write_hook_snapshot(script);
    let c = check(browser, &report(&run), "demo-with-snapshot");
    assert_first_screen_and_interaction(&c, 1);
    let hover = c.selftest["devices"][0]["hover"].as_str().unwrap();
    // The demo annotates no block: its allocated line is the snapshot's tensors, once.
    let tensors = format!("allocated, pid {} 512.0 MiB", header.pid);
    assert!(hover.contains(&tensors), "{tensors} in {hover}");
    assert!(
        !hover.contains("PyTorch"),
        "no second line of the same tensors: {hover}"
    );
    assert!(c.dom.contains("allocated, pid"), "the legend names it");
}

/// `report --baseline`: the baseline's lines join the plot (the hover reads them), and
/// the page's first screen still holds the verdict and the plot.
#[test]
fn a_report_with_a_baseline_draws_it_on_the_plot_and_reads_it_on_hover() {
    let Some(browser) = browser() else {
        return;
    };
    // The demo on a larger card (it fits), against the demo that runs out of memory.
    let a = run_sim("demo", &[], &["--sim-capacity", "40GiB"], &[]);
    let b = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    let html = b.dir.path().join("against.html");
    b.view(&[
        "report",
        "-o",
        html.to_str().expect("a UTF-8 path"),
        "--baseline",
        a.dir.path().to_str().expect("a UTF-8 path"),
    ]);
    let c = check(browser, &html, "baseline");
    assert_first_screen_and_interaction(&c, 1);
    let hover = c.selftest["devices"][0]["hover"].as_str().unwrap();
    assert!(hover.contains("reserved, baseline"), "{hover}");
    assert!(c.dom.contains("Against the baseline"));
}
