//! `vramtrace export --format parquet` as a user queries it: the SQL of docs/parquet.md,
//! pasted into DuckDB (from PyPI, in a virtualenv this test makes), answers the summary's
//! questions over the dataset as `vramtrace summary --json` answers them from the traces -
//! on the demo, a 16-rank run and the real PyTorch snapshots - and the dataset holds what
//! the issue of many runs asks: runs added beside runs, none overwritten, files 0600.

use serde_json::Value;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use vramtrace_tests::harness::{
    run_sim, run_sim_command, run_within, succeeds, summary_of, vramtrace, workload,
};
use vramtrace_tests::pages::root;

const LIMIT: Duration = Duration::from_secs(900);

/// Python with DuckDB, in a virtualenv kept in the target directory between runs.
fn duckdb() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| vramtrace_tests::venv::python_with("duckdb", "duckdb>=1.1", "duckdb"))
}

/// What a command that must succeed said on stderr.
fn ok(cmd: &mut Command, what: &str) -> String {
    String::from_utf8_lossy(&succeeds(cmd, LIMIT, what).stderr).into_owned()
}

/// Exports `input` into `dataset`; returns the run id it says it wrote.
fn export(dataset: &Path, input: &Path, extra: &[&str]) -> String {
    let said = ok(
        Command::new(vramtrace())
            .args(["export", "--format", "parquet", "-o"])
            .arg(dataset)
            .args(extra)
            .arg(input),
        "export --format parquet",
    );
    let line = said
        .lines()
        .find(|l| l.contains(": run "))
        .unwrap_or_else(|| panic!("no run id in {said}"));
    let rest = &line[line.find(": run ").unwrap() + 6..];
    rest[..rest.find(':').unwrap()].to_string()
}

/// The page's queries' answers: a heading per query, its rows.
fn answers(dataset: &Path, runs: Option<(&str, &str)>) -> Value {
    let mut cmd = Command::new(duckdb());
    cmd.arg(root().join("tests/tests/parquet_queries.py"))
        .arg(root().join("docs/parquet.md"))
        .arg(dataset);
    if let Some((baseline, candidate)) = runs {
        cmd.args([baseline, candidate]);
    }
    let out = run_within(&mut cmd, LIMIT);
    assert!(
        out.status.success(),
        "the queries: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the queries print JSON")
}

fn rows<'a>(answers: &'a Value, heading: &str, run: &'a str) -> impl Iterator<Item = &'a Value> {
    answers[heading]
        .as_array()
        .unwrap_or_else(|| panic!("no query under {heading:?}"))
        .iter()
        .filter(move |r| r["run"] == run)
}

fn same_process(row: &Value, p: &Value) -> bool {
    row["pid"] == p["pid"] && row["host"] == p["host"]
}

/// A partition value as DuckDB reads it back: a rank of digits is an integer.
fn rank_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A group of blocks or tensors as both sides name it: API, stack (none: the largest id),
/// bytes, how many.
fn group(api: &Value, stack: &Value, bytes: &Value, n: &Value) -> (String, u64, u64, u64) {
    let stack = stack.as_u64().unwrap_or(u64::MAX);
    let api = api.as_str().unwrap().to_string();
    (api, stack, bytes.as_u64().unwrap(), n.as_u64().unwrap())
}

/// Every question the page answers in SQL, against the summary of the same input.
fn assert_answers_equal_summary(answers: &Value, run: &str, summary: &Value, what: &str) {
    let processes = summary["processes"].as_array().unwrap();

    // Peak per rank: each process's peak on each device, at each layer.
    let peaks: Vec<&Value> = rows(answers, "Peak per rank", run).collect();
    let mut devices = 0;
    for p in processes {
        for d in p["devices"].as_array().unwrap() {
            if d["peak_reserved_bytes"].as_u64().unwrap_or(0) == 0 {
                continue;
            }
            devices += 1;
            let row = peaks
                .iter()
                .find(|r| same_process(r, p) && r["device"] == d["device"])
                .unwrap_or_else(|| {
                    panic!(
                        "{what}: no peak row for {} device {}",
                        p["pid"], d["device"]
                    )
                });
            for key in [
                "peak_reserved_bytes",
                "peak_allocated_bytes",
                "peak_requested_bytes",
            ] {
                assert_eq!(
                    row[key], d[key],
                    "{what}: {key} of {} device {}",
                    p["pid"], d["device"]
                );
            }
            assert_eq!(
                rank_text(&row["rank"]),
                rank_text(&p["rank"]),
                "{what}: rank"
            );
        }
    }
    assert!(devices > 0, "{what}: the summary has no peak to compare");
    assert_eq!(
        peaks.len(),
        devices,
        "{what}: a peak row per process and device"
    );

    // The rank that failed first: the earliest failure of the run.
    let first = processes
        .iter()
        .flat_map(|p| {
            p["failures"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |f| (f["time_ns"].as_u64().unwrap(), p, f))
        })
        .min_by_key(|(t, ..)| *t);
    let failed: Vec<&Value> = rows(answers, "The rank that failed first", run).collect();
    match first {
        None => assert!(failed.is_empty(), "{what}: no failure, yet {failed:?}"),
        Some((time, p, f)) => {
            assert_eq!(failed.len(), 1, "{what}: {failed:?}");
            let row = failed[0];
            assert_eq!(row["time_ns"], time, "{what}: time of the first failure");
            assert!(same_process(row, p), "{what}: {row} is not {}", p["pid"]);
            assert_eq!(row["requested_bytes"], f["requested_bytes"], "{what}");
            assert_eq!(row["api"], f["api"], "{what}");
            assert_eq!(
                rank_text(&row["rank"]),
                rank_text(&p["rank"]),
                "{what}: rank"
            );
        }
    }

    // Who held each peak: the blocks live at the reserved peak, by call site.
    let held: Vec<&Value> = rows(answers, "Who held each rank's peak", run).collect();
    for p in processes {
        for d in p["devices"].as_array().unwrap() {
            let mut want: Vec<_> = d["at_peak"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| group(&g["api"], &g["stack"], &g["bytes"], &g["blocks"]))
                .collect();
            let mut got: Vec<_> = held
                .iter()
                .filter(|r| same_process(r, p) && r["device"] == d["device"])
                .map(|r| group(&r["api"], &r["stack_id"], &r["bytes"], &r["blocks"]))
                .collect();
            want.sort();
            got.sort();
            assert_eq!(
                got, want,
                "{what}: the blocks at the peak of {} device {}",
                p["pid"], d["device"]
            );
            // The innermost frame SQL names is the summary's first where the summary
            // hides none (C programs: every frame is the program's own).
            for g in d["at_peak"].as_array().unwrap() {
                let Some(shown) = g["frames"].as_array().and_then(|f| f.first()) else {
                    continue;
                };
                let row = held
                    .iter()
                    .find(|r| {
                        same_process(r, p) && r["stack_id"] == g["stack"] && r["api"] == g["api"]
                    })
                    .unwrap();
                if row["file"] == shown["file"] || shown["file"].is_null() {
                    assert_eq!(row["function"], shown["function"], "{what}: {row}");
                }
            }
        }
    }
}

/// The tensors at the allocated peak (their requested bytes, as the summary counts them),
/// against the summary's GPUs that one process held
/// (a GPU's figures sum its processes; the query's are each process's).
fn assert_tensors_equal_summary(answers: &Value, run: &str, summary: &Value, what: &str) -> usize {
    let held: Vec<&Value> =
        rows(answers, "The tensors at each rank's allocated peak", run).collect();
    let mut compared = 0;
    for gpu in summary["devices"].as_array().unwrap() {
        let groups = gpu["tensors_at_peak"].as_array().unwrap();
        if gpu["pids"].as_array().unwrap().len() != 1 || groups.is_empty() {
            continue;
        }
        let mut want: Vec<_> = groups
            .iter()
            .map(|g| group(&g["api"], &g["stack"], &g["bytes"], &g["blocks"]))
            .collect();
        let (pid, device) = (&groups[0]["pid"], &groups[0]["device"]);
        let mut got: Vec<_> = held
            .iter()
            .filter(|r| &r["pid"] == pid && r["host"] == gpu["host"] && &r["device"] == device)
            .map(|r| {
                group(
                    &r["api"],
                    &r["stack_id"],
                    &r["requested_bytes"],
                    &r["tensors"],
                )
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(
            got, want,
            "{what}: the tensors at the peak of GPU {}",
            gpu["gpu"]
        );
        compared += 1;
    }
    compared
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.push(p.clone());
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn the_demo_answers_in_sql_as_in_the_summary_and_a_second_run_is_added_beside_it() {
    let big = run_sim("demo", &[], &["--sim-capacity", "24GiB"], &[]);
    let small = run_sim("demo", &[], &["--sim-capacity", "16GiB"], &[]);
    let scratch = tempfile::tempdir().unwrap();
    let dataset = scratch.path().join("dataset");
    let baseline = export(&dataset, big.dir.path(), &[]);
    let candidate = export(&dataset, small.dir.path(), &[]);
    assert_ne!(baseline, candidate, "two runs, two ids");

    let a = answers(&dataset, Some((&baseline, &candidate)));
    let (big_summary, small_summary) = (summary_of(big.dir.path()), summary_of(small.dir.path()));
    assert_answers_equal_summary(&a, &baseline, &big_summary, "demo on 24 GiB");
    assert_answers_equal_summary(&a, &candidate, &small_summary, "demo on 16 GiB");
    // The demo's own truth: its peak of live bytes is the summary's (held by the demo's
    // tests) and the SQL's.
    let truth = big.truth("demo");
    let peak = rows(&a, "Peak per rank", &baseline).next().unwrap();
    assert_eq!(peak["peak_reserved_bytes"], truth["peak_live_bytes"]["0"]);

    // A run against a baseline: the change is the difference of the two summaries' peaks.
    let peak_of = |s: &Value| {
        s["processes"][0]["devices"][0]["peak_reserved_bytes"]
            .as_i64()
            .unwrap()
    };
    let change = a["A run against a baseline"].as_array().unwrap();
    assert_eq!(change.len(), 1, "{change:?}");
    assert_eq!(change[0]["baseline_bytes"], peak_of(&big_summary));
    assert_eq!(change[0]["candidate_bytes"], peak_of(&small_summary));
    assert_eq!(
        change[0]["change_bytes"],
        peak_of(&small_summary) - peak_of(&big_summary)
    );

    // None overwritten: the same run again is refused, and leaves the dataset as it was.
    let mut before = Vec::new();
    files(&dataset, &mut before);
    let again = Command::new(vramtrace())
        .args(["export", "--format", "parquet", "-o"])
        .arg(&dataset)
        .arg(big.dir.path())
        .output()
        .unwrap();
    assert!(!again.status.success(), "a run exported twice is refused");
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("--force"),
        "the refusal says how to replace: {said}"
    );
    let mut after = Vec::new();
    files(&dataset, &mut after);
    before.sort();
    after.sort();
    assert_eq!(before, after, "nothing added, nothing left behind");
    // --force replaces it, with the same answers.
    assert_eq!(export(&dataset, big.dir.path(), &["--force"]), baseline);
    let replaced = answers(&dataset, None);
    assert_eq!(replaced["Peak per rank"], a["Peak per rank"]);

    // Private: files 0600, directories 0700; no spill left behind.
    for p in &after {
        let name = p.file_name().unwrap().to_string_lossy();
        assert!(!name.starts_with(".vramtrace-spill"), "{}", p.display());
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(p), want, "{}", p.display());
    }
}

#[test]
fn sixteen_ranks_answer_in_sql_as_in_the_summary() {
    // Even ranks run the demo, odd ones a caching allocator (an allocated layer); each
    // rank on its own GPU, of a size that differs by rank, so that peaks and the first
    // failure differ.
    let (demo, pool) = (workload("demo"), workload("caching_pool"));
    let mut script = String::new();
    for rank in 0..16u64 {
        let program = if rank % 2 == 0 { &demo } else { &pool };
        let capacity = (12 + rank) << 30;
        script.push_str(&format!(
            "RANK={rank} LOCAL_RANK={} WORLD_SIZE=16 CUDA_VISIBLE_DEVICES={} \
             VRAMTRACE_SIM_CAPACITY={capacity} {} & ",
            rank % 8,
            rank % 8,
            program.display()
        ));
    }
    script.push_str("wait");
    let command = [OsStr::new("sh"), OsStr::new("-c"), OsStr::new(&script)];
    let run = run_sim_command(&command, &[], &[]);
    let summary = run.summary();
    assert_eq!(summary["processes"].as_array().unwrap().len(), 16);

    let scratch = tempfile::tempdir().unwrap();
    let dataset = scratch.path().join("dataset");
    let id = export(&dataset, run.dir.path(), &[]);
    let a = answers(&dataset, None);
    assert_answers_equal_summary(&a, &id, &summary, "16 ranks");
    // Two processes on each GPU here: no GPU's tensors are one process's.
    assert_eq!(
        assert_tensors_equal_summary(&a, &id, &summary, "16 ranks"),
        0
    );
    // A partition per rank.
    let mut ranks: Vec<String> =
        std::fs::read_dir(dataset.join("events").join(format!("run={id}")))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    ranks.sort();
    let mut want: Vec<String> = (0..16).map(|r| format!("rank={r}")).collect();
    want.sort();
    assert_eq!(ranks, want);
    // The caching allocator's ranks have an allocated layer, as its own bookkeeping
    // counts it (its truth names no pid: compare the peaks as a multiset).
    let mut truth: Vec<u64> = run
        .printed_all("VRAMTRACE_POOL ")
        .iter()
        .map(|t| t["allocated_peak"].as_u64().unwrap())
        .collect();
    let mut sql: Vec<u64> = rows(&a, "Peak per rank", &id)
        .filter_map(|r| r["peak_allocated_bytes"].as_u64())
        .collect();
    truth.sort();
    sql.sort();
    assert_eq!(truth.len(), 8, "a pool per odd rank");
    assert_eq!(sql, truth, "the allocated layer's peaks");

    // What each rank held at its end: the segments as the summary has them, the tensors
    // as the caching allocator's own bookkeeping counts them.
    let held: Vec<&Value> = rows(&a, "What each rank held at its end", &id).collect();
    for p in summary["processes"].as_array().unwrap() {
        for d in p["devices"].as_array().unwrap() {
            let row = held
                .iter()
                .find(|r| same_process(r, p) && r["device"] == d["device"]);
            let reserved = row.map_or(0, |r| r["reserved_bytes"].as_u64().unwrap());
            assert_eq!(
                reserved,
                d["reserved_bytes_at_end"].as_u64().unwrap(),
                "pid {} device {}: the segments held at its end",
                p["pid"],
                d["device"]
            );
        }
    }
    let mut truth: Vec<u64> = run
        .printed_all("VRAMTRACE_POOL ")
        .iter()
        .map(|t| t["allocated_end"].as_u64().unwrap())
        .collect();
    let mut sql: Vec<u64> = held
        .iter()
        .filter(|r| r["rank"].as_u64().unwrap() % 2 == 1)
        .map(|r| r["allocated_bytes"].as_u64().unwrap())
        .collect();
    truth.sort();
    sql.sort();
    assert!(truth.iter().any(|&b| b > 0), "{truth:?}");
    assert_eq!(sql, truth, "the tensors held at the end");
    assert!(
        held.iter()
            .filter(|r| r["rank"].as_u64().unwrap() % 2 == 0)
            .all(|r| r["tensors"] == 0),
        "the demo's ranks have no allocated layer"
    );
    // The markers: the caching allocator's three, in its order (tests/workloads/
    // caching_pool.c), and none on the demo's ranks.
    for rank in 0..16u64 {
        let names: Vec<&str> = rows(&a, "The markers of each rank", &id)
            .filter(|r| r["rank"] == rank)
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let want: &[&str] = if rank % 2 == 1 {
            &["model", "step", "pause"]
        } else {
            &[]
        };
        assert_eq!(names, want, "rank {rank}'s markers");
    }
}

/// Each device's segments and held blocks (`active_allocated`, and `active_pending_free`:
/// freed, waiting for another stream) in the snapshot at `path`, as
/// Python's own pickle reads them: device -> (segments, their bytes, tensors, their bytes).
fn held_by_pickle(path: &Path) -> Value {
    let script = r#"
import json, pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
segments = s['segments'] if isinstance(s, dict) else s
held = {}
for g in segments:
    h = held.setdefault(str(g['device']), [0, 0, 0, 0])
    h[0] += 1
    h[1] += g['total_size']
    for b in g['blocks']:
        if b['state'] in ('active_allocated', 'active_pending_free'):
            h[2] += 1
            h[3] += b['size']
print(json.dumps(held))
"#;
    let out = succeeds(
        Command::new("python3").args(["-c", script]).arg(path),
        LIMIT,
        "python3 pickle",
    );
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}

#[test]
fn real_snapshots_answer_in_sql_as_in_the_summary() {
    let Some(snapshots) = vramtrace_tests::fixtures::snapshots() else {
        return;
    };
    assert!(snapshots.len() >= 11, "{snapshots:?}");
    let scratch = tempfile::tempdir().unwrap();
    let dataset = scratch.path().join("dataset");
    let ids: Vec<String> = snapshots.iter().map(|s| export(&dataset, s, &[])).collect();
    let a = answers(&dataset, None);
    for (snapshot, id) in snapshots.iter().zip(&ids) {
        let what = snapshot.file_name().unwrap().to_string_lossy();
        let summary = summary_of(snapshot);
        assert_answers_equal_summary(&a, id, &summary, &what);
        assert!(
            assert_tensors_equal_summary(&a, id, &summary, &what) > 0,
            "{what}: no tensors compared"
        );
        // Its own segments and blocks, as Python's pickle reads them.
        let mut got = serde_json::Map::new();
        for r in rows(&a, "What each rank held at its end", id) {
            let figures = ["segments", "reserved_bytes", "tensors", "allocated_bytes"];
            got.insert(
                r["device"].to_string(),
                figures.iter().map(|f| r[*f].clone()).collect(),
            );
        }
        assert_eq!(
            Value::Object(got),
            held_by_pickle(snapshot),
            "{what}: held at its end"
        );
        // What they were for: the summary's split at the end, category by category.
        let mut sql: Vec<(i64, String, u64, u64)> =
            rows(&a, "What the tensors were for at each rank's end", id)
                .map(|r| {
                    let n = |k: &str| r[k].as_u64().unwrap();
                    let category = r["category"].as_str().unwrap().to_string();
                    (
                        r["device"].as_i64().unwrap(),
                        category,
                        n("tensors"),
                        n("bytes"),
                    )
                })
                .collect();
        let mut truth = Vec::new();
        for d in summary["processes"][0]["devices"].as_array().unwrap() {
            let Some(split) = d["tensor_categories_at_end"]["split"].as_array() else {
                continue;
            };
            for c in split.iter().filter(|c| c["tensors"].as_u64().unwrap() > 0) {
                let category = c["category"].as_str().unwrap().to_string();
                let (n, bytes) = (c["tensors"].as_u64().unwrap(), c["bytes"].as_u64().unwrap());
                truth.push((d["device"].as_i64().unwrap(), category, n, bytes));
            }
        }
        sql.sort();
        truth.sort();
        assert!(!truth.is_empty(), "{what}: no categories");
        assert_eq!(sql, truth, "{what}: what the tensors were for");
    }
}

#[test]
fn a_snapshots_labels_answer_in_sql_as_pythons_pickle_reads_them() {
    let scratch = tempfile::tempdir().unwrap();
    let snapshot = scratch.path().join("labelled.pickle");
    let script = root().join("tests/workloads/labelled_snapshot.py");
    let python = |args: &[&std::ffi::OsStr]| {
        let out = succeeds(
            Command::new("python3").arg(&script).args(args),
            LIMIT,
            "labelled_snapshot.py",
        );
        out.stdout
    };
    python(&["write".as_ref(), snapshot.as_os_str()]);
    let truth: Value = serde_json::from_slice(&python(&[
        "labels".as_ref(),
        snapshot.as_os_str(),
        "-1".as_ref(),
    ]))
    .expect("the workload prints JSON");
    let dataset = scratch.path().join("dataset");
    let id = export(&dataset, &snapshot, &[]);
    let a = answers(&dataset, None);
    let mut got: Vec<(Value, u64)> = rows(
        &a,
        "The tensors by PyTorch's labels at each rank's end",
        &id,
    )
    .map(|r| {
        let pool = match (&r["pool_owner"], &r["pool_id"]) {
            (Value::Null, Value::Null) => Value::Null,
            (o, i) => serde_json::json!([o, i]),
        };
        let annotations = match r["annotations"].as_str() {
            Some(text) => serde_json::from_str(text).expect("a JSON array"),
            None => serde_json::json!([]),
        };
        // A dict is written as its JSON (no string in the workload reads as one).
        let metadata = match r["user_metadata"]
            .as_str()
            .map(serde_json::from_str::<Value>)
        {
            Some(Ok(object @ Value::Object(_))) => object,
            _ => r["user_metadata"].clone(),
        };
        let label = serde_json::json!([metadata, pool, annotations]);
        (label, r["bytes"].as_u64().unwrap())
    })
    .collect();
    let mut want: Vec<(Value, u64)> = truth
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].clone(), p[1].as_u64().unwrap()))
        .collect();
    let key = |x: &(Value, u64)| x.0.to_string();
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert!(want.len() >= 5, "{want:?}");
    assert_eq!(got, want);
}
