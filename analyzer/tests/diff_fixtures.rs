//! `vramtrace diff` of real snapshots: two of one program at two context lengths (and
//! precisions), checked against a replay in Python over Python's own `pickle`: each
//! run's tensor peak, and the difference of every group of tensors at the two peaks,
//! groups keyed by their whole stack (`--all-frames`, so that no frame is left out).

use serde_json::Value;
use std::path::Path;

mod common;

/// The pairs: (A, B), one program each.
const PAIRS: [(&str, &str); 2] = [
    (
        "Wedsonlin_128_inference.pickle",
        "Wedsonlin_512_training.pickle",
    ),
    (
        "kkaitlyn111_memory_ctx128_fullstep_.pickle",
        "kkaitlyn111_memory_ctx512_forward_mixed.pickle",
    ),
];

/// [peak of A, peak of B, every group's B - A sorted] for device 0: tensors alive before
/// the history are the final blocks (not inactive) rewound through it; a tensor counts
/// its requested bytes from `alloc` to `free_completed`; the live set at the first moment
/// of the most bytes, summed by the whole stack of each tensor's allocation.
const GROUPS_BY_PICKLE: &str = r#"
import json, pickle, sys
def frames(fs):
    return tuple((f["name"], f["filename"], f["line"]) for f in fs)
def at_peak(path):
    snap = pickle.load(open(path, "rb"))
    trace = snap["device_traces"][0]
    alive = {}
    for seg in snap["segments"]:
        if seg["device"] != 0:
            continue
        for b in seg["blocks"]:
            if b["state"] != "inactive":
                alive[b["address"]] = (b["requested_size"], frames(b["frames"]))
    for e in reversed(trace):
        if e["action"] == "alloc":
            del alive[e["addr"]]
        elif e["action"] == "free_completed":
            alive[e["addr"]] = (e["size"], ())
    live = sum(r for r, _ in alive.values())
    peak, held = live, dict(alive)
    for e in trace:
        if e["action"] == "alloc":
            alive[e["addr"]] = (e["size"], frames(e["frames"]))
            live += e["size"]
        elif e["action"] == "free_completed":
            live -= alive.pop(e["addr"])[0]
        if live > peak:
            peak, held = live, dict(alive)
    by = {}
    for r, k in held.values():
        by[k] = by.get(k, 0) + r
    return peak, by
pa, a = at_peak(sys.argv[1])
pb, b = at_peak(sys.argv[2])
print(json.dumps([pa, pb, sorted(b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b))]))
"#;

fn diff(args: &[&str], a: &Path, b: &Path) -> Value {
    let mut all = vec!["diff", "--json"];
    all.extend(args);
    all.extend([a.to_str().unwrap(), b.to_str().unwrap()]);
    let out = common::vramtrace_ok(&all);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn numbers(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[test]
fn the_groups_of_two_snapshots_sum_to_the_difference_of_their_peaks() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    for (a, b) in PAIRS {
        let (a, b) = (dir.join(a), dir.join(b));
        let truth = common::python_list(GROUPS_BY_PICKLE, &[&a, &b]);
        let (pa, pb) = (truth[0].as_i64().unwrap(), truth[1].as_i64().unwrap());
        let mut expected = numbers(&truth[2]);
        expected.sort_unstable();

        let whole = diff(&["--all-frames"], &a, &b);
        assert_eq!(whole["layer"], "allocated");
        let d = &whole["devices"][0];
        assert_eq!(d["a"]["peak_bytes"], pa, "{a:?}");
        assert_eq!(d["b"]["peak_bytes"], pb, "{b:?}");
        assert_eq!(d["difference"]["peak_bytes"], pb - pa);
        let groups = d["groups"].as_array().unwrap();
        let mut got: Vec<i64> = groups
            .iter()
            .map(|g| g["difference_bytes"].as_i64().unwrap())
            .collect();
        got.sort_unstable();
        assert_eq!(got, expected, "{a:?} against {b:?}");

        // As shown (machinery frames left out, so stacks that differ only there are one
        // group): the same peaks, and the groups still sum to their difference.
        let shown = diff(&[], &a, &b);
        let d = &shown["devices"][0];
        assert_eq!(d["difference"]["peak_bytes"], pb - pa);
        let sum: i64 = d["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["difference_bytes"].as_i64().unwrap())
            .sum();
        assert_eq!(sum, pb - pa);

        // The differential folded stacks: each run's column sums to its own peak.
        let out =
            common::vramtrace_ok(&["diff", "--folded", a.to_str().unwrap(), b.to_str().unwrap()]);
        let (mut sum_a, mut sum_b) = (0i64, 0i64);
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let mut counts = line.rsplit(' ');
            sum_b += counts.next().unwrap().parse::<i64>().unwrap();
            sum_a += counts.next().unwrap().parse::<i64>().unwrap();
        }
        assert_eq!((sum_a, sum_b), (pa, pb), "{a:?} against {b:?}");
    }
}

#[test]
fn a_snapshot_against_itself_differs_nowhere() {
    let Some(dir) = common::fixtures() else {
        return;
    };
    let a = dir.join(PAIRS[0].1);
    let v = diff(&[], &a, &a);
    let d = &v["devices"][0];
    for key in ["peak_bytes", "peak_reserved_bytes", "reserved_bytes_at_end"] {
        assert_eq!(d["difference"][key], 0, "{key}");
    }
    let groups = d["groups"].as_array().unwrap();
    assert!(!groups.is_empty());
    assert!(groups
        .iter()
        .all(|g| g["change"] == "same" && g["difference_bytes"] == 0));
    let text = common::vramtrace_ok(&["diff", a.to_str().unwrap(), a.to_str().unwrap()]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("the same peak in both"),
        "{text}"
    );
}
