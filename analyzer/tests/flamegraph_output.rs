//! Where `flamegraph` writes, and what it draws when there is nothing to draw.

mod common;
use common::*;

/// GIVEN one process that allocates 1 GiB and frees it, then makes `cudaMalloc(0)` and
/// never frees that: nothing of any size leaked. Its trace is in `traces/` of the
/// directory returned.
fn zero_byte_leak() -> (tempfile::TempDir, std::path::PathBuf) {
    one_trace_dir(
        "vramtrace-h-10.jsonl",
        &[
            header(10, "h", S, 1_700_000_000 * S, None),
            alloc(10 * MS, 0, "cudaMalloc", 0x1000, GIB),
            free(20 * MS, 0, "cudaFree", 0x1000),
            alloc(30 * MS, 0, "cudaMalloc", 0x2000, 0),
            end(40 * MS, 3),
        ],
    )
}

/// Folded text without `-o` goes to stdout (a pipe to another tool), and no file named
/// `.svg` is written with text in it.
#[test]
fn folded_without_output_goes_to_stdout() {
    let (dir, traces) = zero_byte_leak();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(["flamegraph", "--folded", traces.to_str().unwrap()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The peak: the 1 GiB block, allocated with no stack.
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "pid 10;cudaMalloc 1073741824\n"
    );
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["traces"], "no file written");
}

/// Only 0-byte blocks never freed: the flamegraph says nothing leaked (inferno refuses
/// a graph of zero-width stacks), and the folded text is empty.
#[test]
fn only_zero_byte_leaks_draw_nothing_leaked() {
    let (dir, traces) = zero_byte_leak();
    let t = traces.to_str().unwrap();
    let (leaks, _, _) = json_view(&["leaks", "--json", t]);
    assert_eq!(leaks["leaked_bytes"], 0, "the ground truth: {leaks}");
    let svg = dir.path().join("leaks.svg");
    vramtrace_ok(&["flamegraph", "--leaks", "-o", svg.to_str().unwrap(), t]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("nothing leaked"), "{text}");
    let folded = vramtrace_ok(&["flamegraph", "--leaks", "--folded", t]);
    assert_eq!(String::from_utf8(folded.stdout).unwrap(), "");
}
