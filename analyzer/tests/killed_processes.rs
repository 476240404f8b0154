//! A killed process (its trace cut, no end record) holds its memory in the run's totals
//! until, at the latest, a process that started after its last event takes the same
//! device; a process that was already running beside it does not end it.

mod common;

use common::*;

#[test]
fn a_killed_process_leaves_when_the_next_one_takes_its_device() {
    let dir = tempfile::tempdir().unwrap();
    let unix = 1_700_000_000 * S;
    // A: killed, 10 GiB from 0 s, last event at 1 s. C: started at 0.5 s, beside A, 4 GiB
    // from 0.6 s, ends at 5 s. B: started at 2 s, after A's last event, 10 GiB from 2.1 s,
    // ends at 3 s.
    write_trace(
        dir.path(),
        "a.jsonl",
        &[
            header(1, "node1", 10 * S, unix, None),
            alloc(0, 0, "cudaMalloc", 1 << 40, 10 * GIB),
            meminfo(S, 0, 20 * GIB, 40 * GIB),
        ],
    );
    write_trace(
        dir.path(),
        "c.jsonl",
        &[
            header(3, "node1", 10 * S + S / 2, unix + S / 2, None),
            alloc(S / 10, 0, "cudaMalloc", 2 << 40, 4 * GIB),
            end(4 * S + S / 2, 1),
        ],
    );
    write_trace(
        dir.path(),
        "b.jsonl",
        &[
            header(2, "node1", 12 * S, unix + 2 * S, None),
            alloc(S / 10, 0, "cudaMalloc", 3 << 40, 10 * GIB),
            end(S, 1),
        ],
    );
    let d = dir.path().to_str().unwrap();
    let (v, code, e) = json_view(&["summary", "--json", d]);
    assert_eq!(code, Some(0), "{e}");
    let gpu = &v["devices"][0];
    // A and C together (0.6 s), then C and B once B took the device from the killed A:
    // 14 GiB at most, never A + B + C = 24.
    assert_eq!(gpu["peak_reserved_bytes"], 14 * GIB, "{gpu}");
    assert_eq!(gpu["peak_time_ns"], S / 2 + S / 10, "{gpu}");
    assert_eq!(gpu["reserved_bytes_at_end"], 0, "{gpu}");
    // The timeline's run line: 14 GiB right after B's allocation at 2.1 s, 4 GiB after
    // B's end at 3 s, nothing after C's at 5 s.
    let (t, _, _) = json_view(&["timeline", "--json", "--resolution", "100ms", d]);
    let run = t["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "run")
        .unwrap();
    let at = |ns: u64| {
        run["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["time_ns"] == ns)
            .map(|p| p["live_bytes"].as_u64().unwrap())
    };
    assert_eq!(at(2 * S + S / 10), Some(14 * GIB));
    assert_eq!(at(3 * S), Some(4 * GIB));
    assert_eq!(at(5 * S), Some(0));
}

/// A killed process's trace whose last line was cut mid-write: the figures cover what was
/// read, the cut line is noted, and the exit status is 1, as for any trace that could not
/// be read to its end.
#[test]
fn a_cut_last_line_gives_exit_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.jsonl");
    let text = format!(
        "{}\n{}\n{{\"t\":20,\"tid\":7,\"dev\":0,\"api\":\"cudaMal",
        header(5, "node1", S, 1_700_000_000 * S, None),
        alloc(10, 0, "cudaMalloc", 4096, GIB)
    );
    std::fs::write(&path, text).unwrap();
    let (v, code, e) = json_view(&["summary", "--json", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("cut.jsonl:3: the last line was cut off"), "{e}");
    assert_eq!(v["processes"][0]["truncated"], true);
    assert_eq!(v["processes"][0]["devices"][0]["peak_reserved_bytes"], GIB);
}
