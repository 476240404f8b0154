//! The HTML report opened in a real headless browser (browser/mod.rs): on a constructed
//! run whose figures are known, on a hostile run, and on real PyTorch snapshots. The
//! simulated runs (the demo, ranks, a caching allocator with markers) are in
//! tests/tests/report_browser.rs.

mod browser;
mod common;
use browser::*;
use common::*;
use serde_json::json;

fn marker(t: u64, name: u64) -> String {
    json!({"t": t, "tid": 7, "dev": 0, "api": "vramtrace_marker", "res": 0, "handle": name})
        .to_string()
}

/// A run of one process: 3 GiB then 1 GiB more, 3 GiB freed, 8 GiB refused. The peak is
/// 4 GiB at 20 ms; 1 GiB is live from 30 ms until the process ends. A phase `forward`
/// runs from 5 to 25 ms, and a marker `checkpoint` comes at 35 ms.
#[test]
fn report_says_what_happened_on_its_first_screen_and_answers_hover_and_click() {
    let Some(browser) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    write_trace(
        &traces,
        "vramtrace-h-10.jsonl",
        &[
            header(10, "h", S, 1_700_000_000 * S, Some("0")),
            json!({"name": {"id": 1, "text": "forward"}}).to_string(),
            json!({"name": {"id": 2, "text": "/forward"}}).to_string(),
            json!({"name": {"id": 3, "text": "checkpoint"}}).to_string(),
            marker(5 * MS, 1),
            alloc(10 * MS, 0, "cudaMalloc", 0x1000, 3 * GIB),
            alloc(20 * MS, 0, "cuMemAlloc_v2", 0x2000, GIB),
            marker(25 * MS, 2),
            marker(35 * MS, 3),
            free(30 * MS, 0, "cudaFree", 0x1000),
            failed(40 * MS, 0, "cudaMalloc", 8 * GIB),
            end(50 * MS, 7),
        ],
    );
    let html = dir.path().join("report.html");
    let out = vramtrace(&[
        "report",
        "-o",
        html.to_str().unwrap(),
        traces.to_str().unwrap(),
    ]);
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
    assert!(page.contains("viewBox=\"0 0 960 300\""), "the plot scales");

    let c = check(browser, &html, "constructed");
    assert_first_screen_and_interaction(&c, 1);
    let s = &c.selftest;
    let verdict = s["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with(
            "Out of memory: cudaMalloc of 8.0 GiB failed on GPU 0 at 0.040s, pid 10 (rank 0) holding 1.0 GiB."
        ),
        "{verdict}"
    );
    assert!(
        verdict.contains("The peak: 4.0 GiB reserved on GPU 0 at 0.020s."),
        "{verdict}"
    );
    assert!(
        verdict.contains("Nothing leaked; 1.0 GiB was still live when the program ended after its failed allocation"),
        "{verdict}"
    );
    let d = &s["devices"][0];
    // The peak's live set: both allocations, in 2 groups.
    assert_eq!(
        d["peak_title"],
        "peak: 4.0 GiB live at 0.020s in 2 blocks (reserved)"
    );
    assert_eq!(d["peak_rows"], 2);
    // Hovering the middle of the plot (25 ms, before the free at 30 ms): 4 GiB.
    assert!(d["hover"].as_str().unwrap().starts_with("at 0.025s"), "{d}");
    assert!(
        d["hover"].as_str().unwrap().contains("reserved 4.0 GiB"),
        "{d}"
    );
    // Clicking there: the last moment kept at or before 25 ms is the peak's.
    assert!(
        d["click_title"]
            .as_str()
            .unwrap()
            .contains("4.0 GiB live at 0.020s"),
        "{d}"
    );
    // Clicking the right edge: the last moment, the failure, with 1 GiB left.
    assert!(
        d["click_end_title"]
            .as_str()
            .unwrap()
            .contains("1.0 GiB live at 0.040s in 1 block"),
        "{d}"
    );
    // Brushed to its first half (0 to 25 ms), the axis ticks every 5 ms, and a click
    // in the middle of the window (12.5 ms) finds the 3 GiB live from 10 ms.
    assert_eq!(d["zoom_axis"].as_array().unwrap().last().unwrap(), "0.02s");
    assert!(
        d["zoom_click_title"]
            .as_str()
            .unwrap()
            .contains("3.0 GiB live at 0.010s in 1 block"),
        "{d}"
    );
    assert!(
        d["zoom_hover"].as_str().unwrap().starts_with("at 0.012"),
        "{d}"
    );
    // The phase (5 to 25 ms) is drawn again for the window: twice as wide.
    let widths = (
        d["phase_width"].as_f64().unwrap(),
        d["zoom_phase_width"].as_f64().unwrap(),
    );
    assert!((widths.1 / widths.0 - 2.0).abs() < 0.01, "{widths:?}");
    // The failure is marked on the plot, with the capacity unknown (no meminfo).
    assert!(
        c.dom.contains("out of memory: 8.0 GiB"),
        "the failure's marker"
    );
    assert!(
        c.dom.contains("peak 4.0 GiB at 0.020s"),
        "the peak's marker"
    );
    assert_eq!(
        c.dom.matches("<iframe class=\"vt-flame\"").count(),
        2,
        "failure and peak graphs"
    );
}

/// Hostile hosts, GPU labels, frames and a marker name (`<!--<script>` among them)
/// leave the page one document: its script runs, both GPUs have their section and plot,
/// the marker is drawn with its name escaped, and no element came from the trace.
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
    let c = check(browser, &html, "hostile");
    assert_first_screen_and_interaction(&c, 2);
    let dom = &c.dom;
    // GPU sections (2), ranks, failed allocations, who held the peak, held at the end,
    // processes.
    assert_eq!(dom.matches("<h2>").count(), 7, "{dom}");
    assert_eq!(dom.matches("<script").count(), 2, "the report's own: {dom}");
    assert!(!dom.contains("alert(1)</script>"), "{dom}");
    assert!(dom.contains("class=\"vt-marker\""), "the marker is drawn");
    let titles: Vec<&str> = c.selftest["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["peak_title"].as_str())
        .collect();
    // Host evil's peak: 3 GiB; the other host's: 512 MiB.
    assert!(
        titles.iter().any(|t| t.starts_with("peak: 3.0 GiB live")),
        "{titles:?}"
    );
    assert!(
        titles.iter().any(|t| t.starts_with("peak: 512.0 MiB live")),
        "{titles:?}"
    );
}

/// A snapshot alone: its figures against Python's own reading of the pickle. EoR_NN's
/// history (PyTorch 2.2+, with times) never frees a segment, so its reserved peak is its
/// final segments' total; LLM-inference's (2.0-era, no times) is one moment.
#[test]
fn real_snapshots_report_their_peak_and_tensors_by_call_site() {
    if common::fixtures().is_none() {
        return;
    }
    let Some(browser) = browser() else {
        return;
    };
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/torch-snapshots");
    let dir = tempfile::tempdir().unwrap();
    for (name, timed) in [
        ("EoR_NN_snapshot.pickle", true),
        ("LLM-inference_oom_snapshot.pickle", false),
    ] {
        let path = fixtures.join(name);
        let truth: serde_json::Value = serde_json::from_str(&python3(&[
            "-c",
            "import pickle, sys, json\n\
             s = pickle.load(open(sys.argv[1], 'rb'))\n\
             segs = s['segments'] if isinstance(s, dict) else s\n\
             traces = s.get('device_traces', []) if isinstance(s, dict) else []\n\
             freed = sum(1 for t in traces for e in t if e['action'] in ('segment_free', 'segment_unmap'))\n\
             print(json.dumps({'reserved': sum(g['total_size'] for g in segs), 'segments_freed': freed}))",
            path.to_str().unwrap(),
        ]))
        .unwrap();
        assert_eq!(
            truth["segments_freed"], 0,
            "{name}: the peak is the final total"
        );
        let reserved = truth["reserved"].as_u64().unwrap();
        let html = dir.path().join(format!("{name}.html"));
        vramtrace_ok(&[
            "report",
            "-o",
            html.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        let c = check(browser, &html, name.split('_').next().unwrap());
        assert_first_screen_and_interaction(&c, 1);
        let verdict = c.selftest["verdict"].as_str().unwrap();
        let peak = format!("The peak: {} reserved on GPU", binary(reserved));
        assert!(verdict.contains(&peak), "{name}: {peak} in {verdict}");
        assert!(
            verdict.contains("when the snapshot was taken (not a leak)"),
            "{verdict}"
        );
        let d = &c.selftest["devices"][0];
        // The live set is tensors, named by the operator and the Python that asked.
        let title = d["peak_title"].as_str().unwrap();
        assert!(
            title.contains("tensors (requested bytes)"),
            "{name}: {title}"
        );
        assert!(
            c.dom.contains("(flex_opt.py:") || c.dom.contains("(counterfactuals.py:"),
            "{name}"
        );
        assert_eq!(
            c.dom.contains("one moment: the input carries no times"),
            !timed,
            "{name}"
        );
        if !timed {
            // One moment, its dump: no time of 0 said anywhere.
            assert!(title.contains(" live at its dump in "), "{title}");
            let zero = c
                .dom
                .find(" 0.000")
                .map(|i| &c.dom[i.saturating_sub(200)..i + 20]);
            assert_eq!(zero, None, "{name}");
            assert!(
                !c.dom.contains("drag across it to zoom in"),
                "nothing to zoom into"
            );
        }
        // A snapshot has no pid: it is named by its file, in its section, the legend,
        // the live set and the tables.
        assert!(!c.dom.contains("pid 0"), "{name}: {}", c.dom);
        assert!(c.dom.contains(&format!("<span>{name}</span>")), "{name}");
        assert!(c.dom.contains(&format!("allocated, {name}")), "{name}");
        assert!(c.dom.contains(&format!("<td>{name}</td>")), "{name}");
        // The peak's live set keeps its 10 largest groups and says what it leaves out,
        // as many as `summary --json` counts at the peak.
        let summary: serde_json::Value = serde_json::from_slice(
            &vramtrace_ok(&["summary", "--json", path.to_str().unwrap()]).stdout,
        )
        .unwrap();
        let groups = summary["devices"][0]["tensors_at_peak"]
            .as_array()
            .unwrap()
            .len();
        let more = d["peak_more"].as_str().unwrap();
        if groups > 10 {
            assert!(
                more.starts_with(&format!("and {} more groups, ", groups - 10)),
                "{name}: {more}"
            );
        } else {
            assert_eq!(more, "", "{name}");
        }
    }
}

/// A header of `rank` that sees the GPUs `visible` (CUDA_VISIBLE_DEVICES).
fn rank_header(pid: u32, rank: &str, visible: &str) -> String {
    let mut h: serde_json::Value =
        serde_json::from_str(&header(pid, "h", S, 1_700_000_000 * S, Some(rank))).unwrap();
    h["env"]["CUDA_VISIBLE_DEVICES"] = json!(visible);
    h.to_string()
}

/// A section per rank and device: rank 0 runs on GPUs 0 and 1 (two sections of its
/// own), rank 1 shares GPU 1 with it (that GPU shown once, naming both ranks; its plot
/// sums them). The rank table says which GPUs each rank used.
#[test]
fn each_rank_and_device_has_its_section_and_a_shared_gpu_names_its_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let traces = traces_in(dir.path());
    write_trace(
        &traces,
        "vramtrace-h-10.jsonl",
        &[
            rank_header(10, "0", "0,1"),
            alloc(10 * MS, 0, "cudaMalloc", 0x1000, 3 * GIB),
            alloc(20 * MS, 1, "cudaMalloc", 0x2000, GIB),
            end(50 * MS, 2),
        ],
    );
    write_trace(
        &traces,
        "vramtrace-h-11.jsonl",
        &[
            rank_header(11, "1", "1"),
            alloc(15 * MS, 0, "cudaMalloc", 0x3000, 2 * GIB),
            end(50 * MS, 1),
        ],
    );
    let (html, page) = report_of(dir.path(), &traces);
    let headings: Vec<&str> = page
        .split("<h2>")
        .skip(1)
        .map(|h| &h[..h.find("</h2>").unwrap()])
        .collect();
    assert_eq!(
        headings[..2],
        ["Rank 0 · GPU 0", "GPU 1 · ranks 0, 1"],
        "{headings:?}"
    );
    assert!(page.contains("<td>0</td><td>pid 10</td><td>h</td><td>GPU 0, GPU 1</td>"));
    assert!(page.contains("<td>1</td><td>pid 11</td><td>h</td><td>GPU 1</td>"));
    // GPU 1 holds rank 0's 1 GiB and rank 1's 2 GiB: 3 GiB at its peak.
    assert!(page.contains("reserved, pid 11 rank 1"), "each rank's line");
    let Some(browser) = browser() else {
        return;
    };
    let c = check(browser, &html, "rank-on-two-gpus");
    assert_first_screen_and_interaction(&c, 2);
    assert!(
        c.selftest["devices"][1]["peak_title"]
            .as_str()
            .unwrap()
            .starts_with("peak: 3.0 GiB live"),
        "{}",
        c.selftest
    );
}
