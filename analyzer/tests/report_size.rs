//! The report stays under 5 MiB whatever the run: one of 96 ranks, four to each of 24
//! GPUs, with 400 call stacks, 1500 allocations and 300 markers each, would carry more
//! in full (five lines per plot, a flamegraph and 200 live sets per GPU). The page says
//! what it summarised, and still draws what it keeps.

mod browser;
mod common;
use common::*;
use serde_json::{json, Value};

const GPUS: u32 = 24;
const PER_GPU: u32 = 4;
const RANKS: u32 = GPUS * PER_GPU;
const STACKS: u64 = 400;
const ALLOCATIONS: u64 = 1500;
const MARKERS: u64 = 300;

fn rank_trace(dir: &std::path::Path, rank: u32) {
    let mut h: Value = serde_json::from_str(&header(
        1000 + rank,
        "node",
        S,
        1_700_000_000 * S,
        Some(&rank.to_string()),
    ))
    .unwrap();
    h["env"]["CUDA_VISIBLE_DEVICES"] = json!((rank / PER_GPU).to_string());
    let mut lines = vec![h.to_string()];
    for s in 1..=STACKS {
        let function = format!("layer_{s}_forward_with_a_long_name_{rank}");
        lines.push(
            json!({"frame": {"ip": 0x1000 + s, "module": "/opt/model.so", "offset": s,
                "function": function, "file": "model.py", "line": s}})
            .to_string(),
        );
        lines.push(json!({"node": {"id": s, "parent": 0, "ip": 0x1000 + s}}).to_string());
    }
    lines.push(json!({"name": {"id": 1, "text": "step"}}).to_string());
    let mut t = 0;
    for i in 0..ALLOCATIONS {
        t += 100_000 + (i % 7) * 1000;
        let mut a: Value = serde_json::from_str(&alloc(
            t,
            0,
            "cudaMalloc",
            0x10_0000 + i * 0x1000,
            MIB + (i % 13) * KIB,
        ))
        .unwrap();
        a["stack"] = json!(1 + i % STACKS);
        lines.push(a.to_string());
        if i % 3 != 0 {
            lines.push(free(t + 50_000, 0, "cudaFree", 0x10_0000 + i * 0x1000));
        }
        if i < MARKERS {
            lines.push(
                json!({"t": t + 1, "tid": 7, "dev": 0, "api": "vramtrace_marker", "res": 0, "handle": 1})
                    .to_string(),
            );
        }
    }
    lines.push(end(t + S, lines.len() as u64));
    write_trace(
        dir,
        &format!("vramtrace-node-{}.jsonl", 1000 + rank),
        &lines,
    );
}

#[test]
fn a_report_of_many_ranks_stays_under_5_mib_and_says_what_it_summarised() {
    let dir = tempfile::tempdir().unwrap();
    let traces = traces_in(dir.path());
    for rank in 0..RANKS {
        rank_trace(&traces, rank);
    }
    let (html, page) = report_of(dir.path(), &traces);
    eprintln!("{} bytes", page.len());
    assert!(page.len() <= 5 << 20, "{} bytes", page.len());
    assert!(
        page.contains("<b>Summarised:</b>"),
        "says what it summarised"
    );
    assert!(
        page.contains("the page was over 5.0 MiB with everything"),
        "the run is large enough to need less than everything"
    );
    assert!(
        page.contains("more in a table of peaks"),
        "GPUs past the plotted ones"
    );
    assert!(page.contains("<section id=\"vt-other-gpus\">"));
    // The rank table keeps every rank, under a histogram of their peaks (equal here: one
    // bar of all of them); the plots kept are there.
    let ranks = &page[page.find("id=\"vt-ranks\"").unwrap()..];
    let ranks = &ranks[..ranks.find("</table>").unwrap()];
    assert_eq!(ranks.matches("<tr").count(), RANKS as usize + 1);
    assert!(!page.contains("ranks: the first"));
    assert!(
        ranks.contains(&format!("<title>{RANKS} ranks from ")),
        "one bar"
    );
    assert_eq!(ranks.matches("<rect ").count(), 1);
    assert!(page.contains("id=\"vt-plot-0\""));
    // GPU 0's peak: its four ranks do the same at the same times, so it is four times
    // the most one rank held at once (its never-freed third, and one allocation more).
    let (mut live, mut most) = (0u64, 0u64);
    for i in 0..ALLOCATIONS {
        live += MIB + (i % 13) * KIB;
        most = most.max(live);
        if i % 3 != 0 {
            live -= MIB + (i % 13) * KIB;
        }
    }
    let peak = vramtrace_analyzer::units::bytes(most * PER_GPU as u64);
    assert!(page.contains(&format!("peak <b>{peak}</b>")), "{peak}");
    // And the page still works in a browser: every plot kept hovers and clicks.
    if let Some(b) = browser::browser() {
        let c = browser::check(b, &html, "many-ranks");
        let plots = page.matches("<svg xmlns").count();
        browser::assert_first_screen_and_interaction(&c, plots);
    }
}
