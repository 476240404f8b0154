//! PyTorch's own annotations in a snapshot (`external_annotations`): the ranges
//! `record_function` saw are the program's phases, drawn where Python's `pickle` places
//! them, and entries that cannot be read are left out with a note.

mod common;

use std::path::Path;

/// Each file's phases as Python reads them: START ... END of one name, times in ns from
/// the history's earliest entry, within its span; the first 200 to begin, as a plot draws at most.
const PHASES: &str = r#"
import json, pickle, sys
out = []
for path in sys.argv[1:]:
    d = pickle.load(open(path, "rb"))
    if isinstance(d, list):
        out.append([]); continue
    times = [e["time_us"] for t in d.get("device_traces", []) for e in t if e.get("time_us")]
    origin = min(times) if times else None
    open_, phases = {}, []
    notes = sorted(enumerate(d.get("external_annotations") or []),
                   key=lambda x: (x[1]["time_us"], x[0]))
    for i, a in notes:
        if origin is None:
            break
        t = min(max(0, a["time_us"] - origin), max(times) - origin) * 1000
        if a["stage"] == "START":
            open_.setdefault(a["name"], []).append((t, i))
        elif a["stage"] == "END" and open_.get(a["name"]):
            start, order = open_[a["name"]].pop()
            phases.append((start, order, a["name"], t))
    out.append(sorted([n, s, e] for s, _, n, e in sorted(phases)[:200]))
print(json.dumps(out))
"#;

/// The phases an SVG plot draws: (name, start ns, end ns), sorted.
fn drawn(svg: &str) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for part in svg.split("<rect class=\"vt-phase\" data-t=\"").skip(1) {
        let (start, rest) = part.split_once('"').unwrap();
        let rest = rest.strip_prefix(" data-t1=\"").unwrap();
        let (end, rest) = rest.split_once('"').unwrap();
        let title = rest.split_once("<title>phase ").unwrap().1;
        let name = title.split_once(" (pid ").unwrap().0;
        out.push((
            name.to_string(),
            start.parse().unwrap(),
            end.parse().unwrap(),
        ));
    }
    out.sort();
    out
}

/// The phases `timeline --svg` draws of `input`, its plot written to `svg`.
fn plotted(svg: &Path, input: &Path) -> Vec<(String, u64, u64)> {
    let args = [
        "timeline",
        "--svg",
        svg.to_str().unwrap(),
        input.to_str().unwrap(),
    ];
    common::vramtrace_ok(&args);
    drawn(&std::fs::read_to_string(svg).unwrap())
}

#[test]
fn real_snapshots_annotations_are_phases_where_python_places_them() {
    let Some(files) = vramtrace_tests::fixtures::snapshots() else {
        return;
    };
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let expected = common::python_list(PHASES, &paths);
    let dir = tempfile::tempdir().unwrap();
    let mut phases = 0;
    for (i, (path, want)) in files.iter().zip(&expected).enumerate() {
        let got = plotted(&dir.path().join(format!("{i}.svg")), path);
        let want: Vec<(String, u64, u64)> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p[0].as_str().unwrap().to_string(),
                    p[1].as_u64().unwrap(),
                    p[2].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{}", path.display());
        phases += got.len();
    }
    assert!(phases >= 6, "phases in all: {phases}");
}

#[test]
fn annotations_that_cannot_be_read_are_left_out_with_a_note_and_stray_times_kept_in_span() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("annotated.pickle");
    common::write_snapshot(
        r#"
segments, trace = one_segment_each([(4 * M, [])])
notes = [
    {"stage": "START", "name": "step", "device": 0, "time_us": 1},
    {"stage": "END", "name": "step", "device": 0, "time_us": 4},
    {"stage": "MIDDLE", "name": "step", "device": 0, "time_us": 2},
    {"stage": "START", "device": 0, "time_us": 2},
    "not a dict",
    {"stage": "START", "name": "category:parameters", "device": 0, "time_us": 1},
    {"stage": "END", "name": "category:parameters", "device": 0, "time_us": 2},
    {"stage": "START", "name": "L" * 5000, "device": 0, "time_us": 1},
    {"stage": "START", "name": "late", "device": 0, "time_us": 10 ** 12},
    {"stage": "END", "name": "late", "device": 0, "time_us": 10 ** 12 + 1},
]
pickle.dump({"segments": segments, "device_traces": [trace], "external_annotations": notes},
            open(sys.argv[1], "wb"))
"#,
        &path,
    );
    let out = common::vramtrace_ok(&["summary", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("6 entries of \"external_annotations\" left out"),
        "{stderr}"
    );
    let got = plotted(&dir.path().join("plot.svg"), &path);
    // Placed within the history's span (its entries at 1 and 2 us): an end after it
    // at its end, a phase long after it at its end too, not a run stretched to it.
    let want = vec![
        ("late".to_string(), 1000, 1000),
        ("step".to_string(), 0, 1000),
    ];
    assert_eq!(got, want);
    // A name like a category range relabelled nothing: the tensor's category is its own.
    let (summary, _, _) = common::json_view(&["summary", "--json", path.to_str().unwrap()]);
    let device = &summary["processes"][0]["devices"][0];
    let parameters = device["tensor_categories_at_end"]["split"][0]["bytes"].as_u64();
    assert_eq!(parameters, Some(0), "{device}");
    assert_eq!(summary["duration_ns"].as_u64(), Some(1000));
}

/// For each (original, exported) pair of files: the original's annotations that pair
/// (a START and the next END of its name and device), times placed within its history's
/// span as the reader places them; and the exported file's annotations, both sorted.
const KEPT: &str = r#"
import json, pickle, sys
out = []
args = sys.argv[1:]
for original, exported in zip(args[::2], args[1::2]):
    d = pickle.load(open(original, "rb"))
    d = d if isinstance(d, dict) else {}
    times = [e["time_us"] for t in d.get("device_traces", []) for e in t if e.get("time_us")]
    lo, hi = (min(times), max(times)) if times else (0, 0)
    notes = sorted(enumerate(d.get("external_annotations") or [] if times else []),
                   key=lambda x: (x[1]["time_us"], x[0]))
    open_, kept = {}, []
    for _, a in notes:
        a = dict(a, time_us=min(max(a["time_us"], lo), hi))
        key = (a["device"], a["name"])
        if a["stage"] == "START":
            open_.setdefault(key, []).append(a)
        elif open_.get(key):
            kept += [open_[key].pop(), a]
    row = lambda a: [a["stage"], a["name"], a["device"], a["time_us"]]
    e = pickle.load(open(exported, "rb"))
    out.append([sorted(map(row, kept)), sorted(map(row, e.get("external_annotations", [])))])
print(json.dumps(out))
"#;

#[test]
fn the_memory_viz_export_keeps_a_snapshots_annotations() {
    let Some(files) = vramtrace_tests::fixtures::snapshots() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut pairs = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let out = dir.path().join(format!("{i}.pickle"));
        let args = ["export", "--format", "memory-viz", "-o"];
        let mut args = args.to_vec();
        args.extend([out.to_str().unwrap(), f.to_str().unwrap()]);
        common::vramtrace_ok(&args);
        pairs.extend([f.clone(), out]);
    }
    let paths: Vec<&Path> = pairs.iter().map(|p| p.as_path()).collect();
    let mut annotations = 0;
    for (f, kept) in files.iter().zip(common::python_list(KEPT, &paths)) {
        assert_eq!(kept[1], kept[0], "{}", f.display());
        annotations += kept[0].as_array().unwrap().len();
    }
    assert!(annotations >= 12, "annotations in all: {annotations}");
}
