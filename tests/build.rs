//! Builds the simulated CUDA stack and the workloads with gcc into `target/<profile>/sim/`:
//!
//! ```text
//! sim/libcuda.so.1          simulated driver (soname libcuda.so.1)
//! sim/libcuda.so            -> libcuda.so.1 (cudarc dlopens libcuda.so first; -lcuda links)
//! sim/libcudart.so.12       simulated runtime (soname libcudart.so.12), dlopens the driver
//! sim/libcudart.so          -> libcudart.so.12 (for -lcudart)
//! sim/libcudart_static.a    the same runtime as an archive
//! sim/<workload>            executables, no rpath: put sim/ on LD_LIBRARY_PATH to run them
//! ```
//!
//! Tests find the directory through `env!("VRAMTRACE_SIM_DIR")`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const CFLAGS: &[&str] = &["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC"];
const DRIVER_SOURCES: &[&str] = &[
    "driver.c",
    "driver_mem.c",
    "driver_pool.c",
    "driver_vm.c",
    "driver_procaddr.c",
];

/// How a workload reaches CUDA, which decides what it links against.
enum Link {
    DynamicRuntime,
    StaticRuntime,
    Dlopen,
    Driver,
    /// No CUDA: only `-ldl` and the libraries of `OWN_SYMBOL_LIBS` in `sim/`.
    SimLibs,
}

/// (executable, source, workload name given to truth.c, link, extra flags)
const WORKLOADS: &[(&str, &str, &str, Link, &[&str])] = &[
    (
        "caching_pool",
        "caching_pool.c",
        "caching-pool",
        Link::DynamicRuntime,
        &["-I../interposer/include"],
    ),
    (
        "callchain",
        "callchain.c",
        "callchain",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "random_chains",
        "random_chains.c",
        "random-chains",
        Link::DynamicRuntime,
        &[],
    ),
    // With frame pointers: rbp-based unwind rules, whose steps use bp.
    (
        "random_chains_fp",
        "random_chains.c",
        "random-chains",
        Link::DynamicRuntime,
        &["-fno-omit-frame-pointer"],
    ),
    (
        "fork_in_unload",
        "fork_in_unload.c",
        "fork-in-unload",
        Link::DynamicRuntime,
        &["-ldl"],
    ),
    (
        "unload",
        "unload.c",
        "unload",
        Link::DynamicRuntime,
        &["-ldl"],
    ),
    (
        "runtime_dynamic",
        "runtime_workload.c",
        "runtime-dynamic",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "runtime_static",
        "runtime_workload.c",
        "runtime-static",
        Link::StaticRuntime,
        &[],
    ),
    (
        "driver_dlsym",
        "driver_dlsym.c",
        "driver-dlsym",
        Link::Dlopen,
        &[],
    ),
    (
        "driver_linked",
        "driver_linked.c",
        "driver-linked",
        Link::Driver,
        &[],
    ),
    (
        "expandable",
        "expandable.c",
        "expandable",
        Link::DynamicRuntime,
        &[],
    ),
    ("threads", "threads.c", "threads", Link::DynamicRuntime, &[]),
    (
        "fork_exec",
        "fork_exec.c",
        "fork-parent",
        Link::DynamicRuntime,
        &[],
    ),
    // -rdynamic: the allocation sites (alloc_parameters, ...) get dynamic symbols, so
    // even a dladdr-only symboliser can name them.
    (
        "demo",
        "demo.c",
        "demo",
        Link::DynamicRuntime,
        &["-rdynamic"],
    ),
    // Fault workloads (tests/tests/faults.rs) and the benchmark program (scripts/bench.sh).
    ("killed", "killed.c", "killed", Link::DynamicRuntime, &[]),
    ("teardown", "teardown.c", "teardown", Link::Driver, &[]),
    (
        "exit_busy",
        "exit_busy.c",
        "exit-busy",
        Link::DynamicRuntime,
        &[],
    ),
    ("signals", "signals.c", "signals", Link::DynamicRuntime, &[]),
    ("hold", "hold.c", "hold", Link::DynamicRuntime, &[]),
    (
        "vfork_exec",
        "vfork_exec.c",
        "vfork-exec",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "fork_threads",
        "fork_threads.c",
        "fork-threads",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "own_symbols",
        "own_symbols.c",
        "own-symbols",
        Link::SimLibs,
        &["-l:libvt_ownsym_a.so", "-l:libvt_ownsym_b.so"],
    ),
    (
        "bench_calls",
        "bench_calls.c",
        "bench-calls",
        Link::DynamicRuntime,
        &[],
    ),
];

/// Libraries of the own_symbols workload, built from one source: (name, id, vt_foo's value).
/// `a` and `b` are linked (in that order), `c` is dlopened.
const OWN_SYMBOL_LIBS: &[(&str, &str, &str)] = &[("a", "a", "1"), ("b", "b", "2"), ("c", "c", "3")];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out
    let sim = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR has the cargo layout")
        .join("sim");
    fs::create_dir_all(&sim).unwrap();
    let src = manifest.join("sim");
    let wl = manifest.join("workloads");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", wl.display());
    println!("cargo:rustc-env=VRAMTRACE_SIM_DIR={}", sim.display());

    write_lookups(
        &src.join("cudart-12.9-driver-lookups.tsv"),
        &out.join("cudart_lookups.inc"),
    );
    let s = |f: &str| src.join(f).display().to_string();
    let o = |f: &str| out.join(f).display().to_string();
    let d = |f: &str| sim.join(f).display().to_string();
    let inc_sim = format!("-I{}", src.display());
    let inc_out = format!("-I{}", out.display());

    // Driver: internal calls and the cuGetProcAddress table must bind to the driver's own
    // functions even when an LD_PRELOADed library exports the same names.
    let args = [
        "-shared",
        "-fvisibility=hidden",
        "-Wl,-soname,libcuda.so.1",
        "-Wl,-Bsymbolic-functions",
        "-Wl,--no-undefined",
    ];
    let driver_srcs: Vec<String> = DRIVER_SOURCES.iter().map(|f| s(f)).collect();
    let driver = d("libcuda.so.1");
    gcc(&[
        &args[..],
        &["-o", &driver],
        &strs(&driver_srcs),
        &["-lpthread"],
    ]
    .concat());
    link(&sim, "libcuda.so.1", "libcuda.so");

    // Runtime: --no-undefined proves it never names a driver function (it may not link libcuda).
    let rt = d("libcudart.so.12");
    let rt_args = [
        "-shared",
        "-fvisibility=hidden",
        "-Wl,-soname,libcudart.so.12",
        "-Wl,--no-undefined",
    ];
    gcc(&[
        &rt_args[..],
        &[&inc_out, "-o", &rt, &s("runtime.c"), "-ldl", "-lpthread"],
    ]
    .concat());
    link(&sim, "libcudart.so.12", "libcudart.so");

    // NVML: what the simulated driver holds for this process, as nvidia-smi shows it.
    gcc(&[
        "-shared",
        "-fvisibility=hidden",
        "-Wl,-soname,libnvidia-ml.so.1",
        "-Wl,--no-undefined",
        "-o",
        &d("libnvidia-ml.so.1"),
        &s("nvml.c"),
        "-ldl",
    ]);
    let rt_obj = o("runtime_static.o");
    gcc(&[
        "-fvisibility=hidden",
        &inc_out,
        "-c",
        "-o",
        &rt_obj,
        &s("runtime.c"),
    ]);
    let archive = d("libcudart_static.a");
    let _ = fs::remove_file(&archive);
    run(Command::new("ar").args(["rcs", &archive, &rt_obj]), "ar");

    let truth_obj = o("truth.o");
    gcc(&[
        &inc_sim,
        "-c",
        "-o",
        &truth_obj,
        &wl.join("truth.c").display().to_string(),
    ]);
    for (name, id, value) in OWN_SYMBOL_LIBS {
        let lib = d(&format!("libvt_ownsym_{name}.so"));
        gcc(&[
            "-shared",
            &format!("-DOWNSYM_NAME=\"{name}\""),
            &format!("-DOWNSYM_ID={id}"),
            &format!("-DOWNSYM_VALUE={value}"),
            "-o",
            &lib,
            &wl.join("own_symbols_lib.c").display().to_string(),
            "-ldl",
        ]);
    }
    let lib_dir = format!("-L{}", sim.display());
    gcc(&[
        "-shared",
        "-o",
        &d("libvt_fork_in_unload.so"),
        &wl.join("fork_in_unload_lib.c").display().to_string(),
    ]);
    for name in ["a", "b"] {
        let lib = d(&format!("libvt_unload_{name}.so"));
        gcc(&[
            "-shared",
            &inc_sim,
            &format!("-DUNLOAD_NAME={name}"),
            "-o",
            &lib,
            &wl.join("unload_lib.c").display().to_string(),
            &lib_dir,
            "-l:libcudart.so.12",
        ]);
    }
    for (exe, source, name, how, extra) in WORKLOADS {
        let define = format!("-DWORKLOAD_NAME=\"{name}\"");
        let (exe_path, source) = (d(exe), wl.join(source).display().to_string());
        let mut a: Vec<&str> = vec![&inc_sim, &define, "-o", &exe_path, &source, &truth_obj];
        match how {
            Link::DynamicRuntime => a.extend([&lib_dir[..], "-l:libcudart.so.12"]),
            Link::StaticRuntime => a.extend([&archive[..], "-ldl"]),
            Link::Dlopen => a.push("-ldl"),
            Link::Driver => a.extend([&lib_dir[..], "-lcuda"]),
            Link::SimLibs => a.push(&lib_dir),
        }
        // After the objects, so that -l options resolve their symbols.
        a.extend_from_slice(extra);
        a.push("-ldl");
        a.push("-lpthread");
        gcc(&a);
    }
}

/// Turns the recorded lookup list into `L("symbol", version, flags)` lines for runtime.c.
fn write_lookups(tsv: &Path, inc: &Path) {
    let text = fs::read_to_string(tsv).unwrap_or_else(|e| panic!("{}: {e}", tsv.display()));
    let mut lines =
        String::from("/* generated by tests/build.rs from cudart-12.9-driver-lookups.tsv */\n");
    for line in text.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if line.starts_with('#') || cols.len() < 4 || cols[0] == "lookup" {
            continue;
        }
        let (symbol, version, flags) = (cols[1], cols[2].trim(), cols[3].trim());
        assert!(
            symbol
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "odd symbol {symbol:?}"
        );
        version.parse::<u32>().expect("numeric version");
        flags.parse::<u32>().expect("numeric flags");
        lines.push_str(&format!("L(\"{symbol}\", {version}, {flags})\n"));
    }
    if fs::read_to_string(inc).ok().as_deref() != Some(&lines) {
        fs::write(inc, lines).unwrap();
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

fn gcc(args: &[&str]) {
    let mut cmd = Command::new("gcc");
    cmd.args(CFLAGS).args(args);
    run(&mut cmd, "gcc");
}

/// Runs a tool; on failure the build fails with the tool's own message.
fn run(cmd: &mut Command, what: &str) {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        panic!("{what} failed ({}): {cmd:?}\n{stderr}", output.status);
    }
}

fn link(dir: &Path, target: &str, name: &str) {
    let path = dir.join(name);
    let _ = fs::remove_file(&path);
    std::os::unix::fs::symlink(target, &path).unwrap();
}
