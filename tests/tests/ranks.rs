//! The ranks of a pipeline-parallel job side by side (`summary`'s `rank_spread`), against
//! what each rank printed of itself: its peak of live bytes and, at it, the bytes each of
//! its allocating functions held, and the size of the allocation that failed.

use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use vramtrace_tests::harness::{run_sim_command, workload, Outcome};

/// What one rank printed of itself.
struct Truth {
    pid: u64,
    rank: String,
    peak: u64,
    oom: u64,
    sites: BTreeMap<String, u64>,
}

fn truths(run: &Outcome) -> Vec<Truth> {
    let mut t: Vec<Truth> = run
        .printed_all("VRAMTRACE_PIPELINE ")
        .iter()
        .map(|v| Truth {
            pid: v["pid"].as_u64().unwrap(),
            rank: v["rank"].as_u64().unwrap().to_string(),
            peak: v["peak"].as_u64().unwrap(),
            oom: v["oom"].as_u64().unwrap(),
            sites: v["sites"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, b)| (k.clone(), b.as_u64().unwrap()))
                .collect(),
        })
        .collect();
    t.sort_by_key(|t| t.rank.parse::<u64>().unwrap());
    t
}

/// `ranks` ranks of `pipeline STEPS`, one after another where `sequential`, on a card of
/// `capacity` bytes; each rank on GPU `rank % 8`.
fn ranks(count: u64, sequential: bool, capacity: Option<&str>) -> Outcome {
    let program = workload("pipeline");
    let mut script = String::new();
    for rank in 0..count {
        script.push_str(&format!(
            "RANK={rank} LOCAL_RANK={} WORLD_SIZE={count} CUDA_VISIBLE_DEVICES={} {} 4 {}",
            rank % 8,
            rank % 8,
            program.display(),
            if sequential { "; " } else { "& " }
        ));
    }
    script.push_str("wait");
    let command = [OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)];
    let args: Vec<&str> = capacity.map_or(vec![], |c| vec!["--sim-capacity", c]);
    run_sim_command(&command, &args, &[])
}

/// The allocating function a group's `who` names: the frame after `device_alloc`.
fn site(who: &str) -> String {
    let frames: Vec<&str> = who.split(" <- ").collect();
    let at = frames
        .iter()
        .position(|f| f.starts_with("device_alloc "))
        .unwrap_or_else(|| panic!("no device_alloc frame in {who}"));
    frames[at + 1].split(' ').next().unwrap().to_string()
}

#[test]
fn the_spread_of_twelve_ranks_and_what_the_outliers_hold_are_their_own() {
    let run = ranks(12, false, None);
    let truth = truths(&run);
    assert_eq!(truth.len(), 12);
    let spread = run.summary()["rank_spread"].clone();
    assert_eq!(spread["layer"], "reserved", "no allocator annotated");
    assert_eq!(spread["ranks"], 12);

    let mut peaks: Vec<u64> = truth.iter().map(|t| t.peak).collect();
    peaks.sort_unstable();
    let median = peaks[(peaks.len() - 1) / 2];
    assert_eq!(spread["min_bytes"], peaks[0]);
    assert_eq!(spread["max_bytes"], *peaks.last().unwrap());
    assert_eq!(spread["median_bytes"], median);
    let of = |key: &str| spread[key].as_str().unwrap().to_string();
    let peak_of = |rank: &str| truth.iter().find(|t| t.rank == rank).unwrap().peak;
    assert_eq!(peak_of(&of("min_rank")), peaks[0]);
    assert_eq!(peak_of(&of("max_rank")), *peaks.last().unwrap());
    // The first rank, in rank order, at the median.
    let median_rank = truth.iter().find(|t| t.peak == median).unwrap();
    assert_eq!(of("median_rank"), median_rank.rank);
    assert_eq!(
        spread["above_median"],
        truth.iter().filter(|t| t.peak > median).count()
    );

    // The furthest above the median, furthest first, equal ones in rank order.
    let mut above: Vec<&Truth> = truth.iter().filter(|t| t.peak > median).collect();
    above.sort_by_key(|t| std::cmp::Reverse(t.peak));
    let outliers = spread["outliers"].as_array().unwrap();
    assert_eq!(outliers.len(), above.len().min(5));
    for (o, t) in outliers.iter().zip(&above) {
        assert_eq!(o["rank"].as_str().unwrap(), t.rank);
        assert_eq!(o["pid"], t.pid);
        assert_eq!(o["peak_bytes"], t.peak);
        assert_eq!(o["above_median_bytes"], t.peak - median);
        // What it held more of than the median rank, by allocating function.
        let mut want: Vec<(String, u64, u64)> = t
            .sites
            .iter()
            .map(|(site, &b)| (site.clone(), b, *median_rank.sites.get(site).unwrap_or(&0)))
            .filter(|(_, b, m)| b > m)
            .collect();
        want.sort_by(|a, b| (b.1 - b.2).cmp(&(a.1 - a.2)).then(a.0.cmp(&b.0)));
        want.truncate(3);
        let got: Vec<(String, u64, u64)> = o["holds_more"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    site(m["who"].as_str().unwrap()),
                    m["bytes"].as_u64().unwrap(),
                    m["median_rank_bytes"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "rank {}", t.rank);
    }
    // The first stage holds the embeddings: the outliers name them.
    assert!(outliers[0]["holds_more"][0]["who"]
        .as_str()
        .unwrap()
        .contains("alloc_embeddings"));
    let text = run.view(&["summary"]);
    assert!(text.contains("ranks: 12 ranks, peaks (reserved)"), "{text}");
    assert!(text.contains("more  cudaMalloc <- device_alloc"), "{text}");
    assert!(!text.contains("out of memory first"), "{text}");
    // The report's histogram counts every rank once, in the bar of its own peak.
    let page = run.dir.path().join("report.html");
    run.view(&["report", "-o", page.to_str().unwrap()]);
    let page = std::fs::read_to_string(&page).unwrap();
    let (lo, hi) = (peaks[0], *peaks.last().unwrap());
    let mut bars = [0usize; 40];
    for p in &peaks {
        bars[(((p - lo) as u128 * 40 / (hi - lo) as u128) as usize).min(39)] += 1;
    }
    let drawn: Vec<usize> = page
        .split("<title>")
        .skip(1)
        .filter_map(|t| t.split_once(" ranks from ").or(t.split_once(" rank from ")))
        .map(|(n, _)| n.parse().unwrap())
        .collect();
    let want: Vec<usize> = bars.into_iter().filter(|&n| n > 0).collect();
    assert_eq!(drawn, want);
}

#[test]
fn ranks_that_ran_out_of_memory_are_listed_in_the_order_they_did() {
    // One after another on an 11-GiB card: the first stage's ranks (model state and
    // embeddings, 11 GiB) fail, the others fit.
    let run = ranks(8, true, Some("11GiB"));
    let truth = truths(&run);
    assert_eq!(truth.len(), 8);
    let failed: Vec<&Truth> = truth.iter().filter(|t| t.oom > 0).collect();
    assert!(failed.len() >= 2, "the first stage fails");
    assert!(failed.len() < truth.len(), "the other stages fit");
    let spread = run.summary()["rank_spread"].clone();
    let got: Vec<(String, u64, u64)> = spread["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rank"].as_str().unwrap().to_string(),
                f["pid"].as_u64().unwrap(),
                f["requested_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    // Ranks ran in rank order: they failed in it.
    let want: Vec<(String, u64, u64)> = failed
        .iter()
        .map(|t| (t.rank.clone(), t.pid, t.oom))
        .collect();
    assert_eq!(got, want);
    let times: Vec<u64> = spread["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["time_ns"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    let text = run.view(&["summary"]);
    let first = format!("out of memory first: rank {}", failed[0].rank);
    assert!(text.contains(&first), "{text}");
}

/// A run without ranks, or with one, has no spread.
#[test]
fn one_rank_has_no_spread() {
    let run = ranks(1, false, None);
    let summary: Value = run.summary();
    assert!(summary["rank_spread"].is_null());
    assert_eq!(summary["ranks"].as_array().unwrap().len(), 1);
}

/// Ranks whose allocator annotates its tensors are compared by their tensors: the peaks
/// of requested bytes the allocator's own bookkeeping counts.
#[test]
fn ranks_with_tensors_are_compared_by_their_tensors() {
    let pool = workload("caching_pool");
    let mut script = String::new();
    for rank in 0..3 {
        script.push_str(&format!(
            "RANK={rank} CUDA_VISIBLE_DEVICES={rank} {} & ",
            pool.display()
        ));
    }
    script.push_str("wait");
    let command = [OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)];
    let run = run_sim_command(&command, &[], &[]);
    let mut peaks: Vec<u64> = run
        .printed_all("VRAMTRACE_POOL ")
        .iter()
        .map(|t| t["requested_peak"].as_u64().unwrap())
        .collect();
    assert_eq!(peaks.len(), 3);
    peaks.sort_unstable();
    let spread = run.summary()["rank_spread"].clone();
    assert_eq!(spread["layer"], "allocated");
    assert_eq!(spread["min_bytes"], peaks[0]);
    assert_eq!(spread["median_bytes"], peaks[1]);
    assert_eq!(spread["max_bytes"], peaks[2]);
}
