//! Inlined calls: an allocation made in a helper the compiler inlined into its caller
//! names the helper and the caller, in the order of the source's call chain, in the trace
//! and in every view; file and line of each are those `addr2line -i` reads from the
//! binary.

use serde_json::Value;
use std::process::Command;
use vramtrace_schema::Event;
use vramtrace_tests::harness::{check, run_sim, same, workload, Outcome};

/// The workload's own call chain of its allocation: (size, functions innermost first).
fn chain(run: &Outcome) -> (u64, Vec<String>) {
    let printed = run.printed("VRAMTRACE_INLINED ");
    let functions = printed["functions"].as_array().unwrap();
    let names = functions
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    (printed["size"].as_u64().unwrap(), names)
}

fn allocation(run: &Outcome, size: u64) -> Event {
    *run.traces[0]
        .events
        .iter()
        .find(|e| e.api.name() == "cudaMalloc" && e.size == size)
        .expect("the allocation")
}

/// `addr2line -i -f` of the call before return address `offset` in `exe`: (function,
/// file name, line) of each call, innermost first.
fn addr2line(exe: &std::path::Path, offset: u64) -> Vec<(String, String, u32)> {
    let out = Command::new("addr2line")
        .args(["-i", "-f", "-e"])
        .arg(exe)
        .arg(format!("{:#x}", offset - 1))
        .output()
        .expect("addr2line (binutils) runs");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|pair| {
            // "file:line" or "file:line (discriminator N)"
            let place = pair[1].split(' ').next().unwrap();
            let (file, line) = place.rsplit_once(':').unwrap();
            let file = file.rsplit('/').next().unwrap().to_string();
            (pair[0].to_string(), file, line.parse().unwrap())
        })
        .collect()
}

#[test]
fn an_inlined_helper_and_its_caller_are_both_in_the_trace_in_call_order() {
    let run = run_sim("inlined", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    check(&run, run.truth("inlined"), same);
    let (size, expected) = chain(&run);
    let trace = &run.traces[0];
    let e = allocation(&run, size);
    let calls = trace.stacks.calls(e.stack);
    let names: Vec<&str> = calls.iter().map(|c| c.function.unwrap_or("")).collect();
    assert!(names.len() >= expected.len(), "{names:?}");
    assert_eq!(names[..expected.len()], expected, "calls: {calls:?}");
    // The helper has no frame of its own: it is the first frame's inlined call.
    assert!(calls[0].inlined && !calls[1].inlined, "{calls:?}");
    assert_eq!(calls[0].frame.ip, calls[1].frame.ip);
    // File and line of each call at that address, as binutils reads them.
    let frame = calls[0].frame;
    let truth = addr2line(&workload("inlined"), frame.offset);
    let recorded: Vec<(String, String, u32)> = frame
        .calls()
        .map(|c| {
            let file = c.file.unwrap_or("").rsplit('/').next().unwrap().to_string();
            (
                c.function.unwrap_or("").to_string(),
                file,
                c.line.unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(recorded, truth);
    assert_eq!(
        truth.len(),
        2,
        "reserve_buffer inlined into layer_b: {truth:?}"
    );
}

#[test]
fn views_and_flamegraphs_show_the_inlined_helper_inside_its_caller() {
    let run = run_sim("inlined", &[], &[], &[]);
    assert!(run.output.status.success(), "{}", run.stderr());
    let (size, expected) = chain(&run);

    let peak: Value = serde_json::from_str(&run.view(&["peak", "--json"])).unwrap();
    let group = peak["devices"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["bytes"].as_u64() == Some(size))
        .expect("the allocation's group");
    let frames = group["frames"].as_array().unwrap();
    let names: Vec<&str> = frames
        .iter()
        .map(|f| f["function"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names[..expected.len()], expected, "{frames:?}");
    assert_eq!(frames[0]["inlined"], Value::Bool(true));
    assert_eq!(frames[1].get("inlined"), None, "layer_b is a real frame");

    let text = run.view(&["peak"]);
    let helper = text.find("reserve_buffer").expect("the helper in peak");
    let caller = text.find("layer_b").expect("its caller in peak");
    assert!(helper < caller, "innermost first: {text}");

    let folded = run.view(&["flamegraph", "--folded", "-o", "-"]);
    let line = folded
        .lines()
        .find(|l| l.contains("layer_b"))
        .unwrap_or_else(|| panic!("a folded line through layer_b: {folded}"));
    let (stack, bytes) = line.rsplit_once(' ').unwrap();
    assert_eq!(bytes.parse::<u64>().unwrap(), size);
    let names: Vec<&str> = stack
        .split(';')
        .map(|f| f.split(' ').next().unwrap())
        .collect();
    // Outermost first, then the API.
    let outward: Vec<&str> = expected.iter().rev().map(String::as_str).collect();
    let tail = &names[names.len() - expected.len() - 1..];
    assert_eq!(tail[..expected.len()], outward, "{stack}");
    assert_eq!(tail[expected.len()], "cudaMalloc");
}
