//! Builds the simulated CUDA stack and the workloads with gcc into `target/<profile>/sim/`:
//!
//! ```text
//! sim/libcuda.so.1          simulated driver (soname libcuda.so.1)
//! sim/libcuda.so            -> libcuda.so.1 (cudarc dlopens libcuda.so first; -lcuda links)
//! sim/libcudart.so.12       simulated runtime (soname libcudart.so.12), dlopens the driver
//! sim/libcudart.so          -> libcudart.so.12 (for -lcudart)
//! sim/libcudart_static.a    the same runtime as an archive
//! sim/libcudart.so.13       the CUDA 13 runtime (13.5's lookups), and libcudart13_static.a
//! sim/libvt_sharing_layer.so a GPU-sharing layer that overrides dlsym and cuGetProcAddress
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

/// A simulated runtime version: what NVIDIA's runtime of that version asks the driver for
/// at start (recorded lists), and its CUDA version.
struct Runtime {
    major: u32,
    version: u32,
    lookups: &'static str,
    inc: &'static str,
}

const RUNTIMES: &[Runtime] = &[
    Runtime {
        major: 12,
        version: 12090,
        lookups: "cudart-12.9-driver-lookups.tsv",
        inc: "cudart_lookups.inc",
    },
    Runtime {
        major: 13,
        version: 13050,
        lookups: "cudart-13.5-driver-lookups.tsv",
        inc: "cudart13_lookups.inc",
    },
];

/// How a workload reaches CUDA, which decides what it links against.
enum Link {
    DynamicRuntime,
    StaticRuntime,
    /// The same, against the CUDA 13 runtime (`libcudart.so.13`, `libcudart13_static.a`).
    DynamicRuntime13,
    StaticRuntime13,
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
        "tagged_pool",
        "tagged_pool.c",
        "tagged-pool",
        Link::DynamicRuntime,
        &[
            "-I../interposer/include",
            "-lpthread",
            "-ldl",
            "-l:libnccl.so.2",
            "-l:libcublas.so.12",
            "-l:libvt_plugin.so",
            "-rdynamic",
        ],
    ),
    (
        "callchain",
        "callchain.c",
        "callchain",
        Link::DynamicRuntime,
        &[],
    ),
    // Optimised: a helper inlined into its caller (the later -O2 wins over CFLAGS' -O1).
    (
        "inlined",
        "inlined.c",
        "inlined",
        Link::DynamicRuntime,
        &["-O2"],
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
        "runtime_dynamic_13",
        "runtime_workload.c",
        "runtime-dynamic",
        Link::DynamicRuntime13,
        &[],
    ),
    (
        "runtime_static_13",
        "runtime_workload.c",
        "runtime-static",
        Link::StaticRuntime13,
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
        "mem_locations",
        "mem_locations.c",
        "mem-locations",
        Link::Driver,
        &[],
    ),
    (
        "locality_domain",
        "locality_domain.c",
        "locality-domain",
        Link::Driver,
        &[],
    ),
    (
        "pool_reuse",
        "pool_reuse.c",
        "pool-reuse",
        Link::Driver,
        &[],
    ),
    (
        "host_pool_oom",
        "host_pool_oom.c",
        "host-pool-oom",
        Link::Driver,
        &[],
    ),
    (
        "unread_props",
        "unread_props.c",
        "unread-props",
        Link::Driver,
        &[],
    ),
    (
        "runtime_locations_dynamic",
        "runtime_locations.c",
        "runtime-locations",
        Link::DynamicRuntime13,
        &[],
    ),
    (
        "runtime_locations_static",
        "runtime_locations.c",
        "runtime-locations",
        Link::StaticRuntime13,
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
    // Host-safety workloads (tests/tests/host.rs).
    (
        "env_race",
        "env_race.c",
        "env-race",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "crash_early",
        "crash_early.c",
        "crash-early",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "main_exit",
        "main_exit.c",
        "main-exit",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "fd_reuse",
        "fd_reuse.c",
        "fd-reuse",
        Link::DynamicRuntime,
        &[],
    ),
    (
        "exec_variants",
        "exec_variants.c",
        "exec-variants",
        Link::DynamicRuntime,
        &[],
    ),
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
        &["-rdynamic", "-I../interposer/include"],
    ),
    // One rank of a pipeline-parallel job (the per-rank views, scripts/bench-ranks.sh).
    (
        "pipeline",
        "pipeline.c",
        "pipeline",
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
    // Two call sites of chosen sizes (tests/tests/diff.rs).
    (
        "grow",
        "grow.c",
        "grow",
        Link::DynamicRuntime,
        &["-I../interposer/include"],
    ),
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
    // XLA's preallocation: the 75% allocation made inside libvt_xla_extension.so.
    (
        "jax_prealloc",
        "jax_prealloc.c",
        "jax-prealloc",
        Link::Driver,
        // -rdynamic: the library records its calls in the program's truth (truth.c).
        &["-l:libvt_xla_extension.so", "-rdynamic"],
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

    for (tsv, inc) in RUNTIMES.iter().map(|r| (r.lookups, r.inc)) {
        write_lookups(&src.join(tsv), &out.join(inc));
    }
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

    // Runtimes: --no-undefined proves they never name a driver function (they may not link
    // libcuda). Each also as an archive, as NVIDIA ships libcudart_static.a.
    for r in RUNTIMES {
        let soname = format!("libcudart.so.{}", r.major);
        let defines = [
            format!("-DRT_VERSION={}", r.version),
            format!("-DCUDART_LOOKUPS=\"{}\"", r.inc),
        ];
        gcc(&[
            "-shared",
            "-fvisibility=hidden",
            &format!("-Wl,-soname,{soname}"),
            "-Wl,--no-undefined",
            &defines[0],
            &defines[1],
            &inc_out,
            "-o",
            &d(&soname),
            &s("runtime.c"),
            "-ldl",
            "-lpthread",
        ]);
        let rt_obj = o(&format!("runtime{}_static.o", r.major));
        gcc(&[
            "-fvisibility=hidden",
            &defines[0],
            &defines[1],
            &inc_out,
            "-c",
            "-o",
            &rt_obj,
            &s("runtime.c"),
        ]);
        let archive = d(&static_runtime(r.major));
        let _ = fs::remove_file(&archive);
        run(Command::new("ar").args(["rcs", &archive, &rt_obj]), "ar");
    }
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
    // A GPU-sharing layer (as HAMi-core's libvgpu.so) to preload beside vramtrace.
    gcc(&[
        "-shared",
        "-fvisibility=hidden",
        &inc_sim,
        "-Wl,--no-undefined",
        "-o",
        &d("libvt_sharing_layer.so"),
        &s("sharing_layer.c"),
        "-ldl",
        "-lpthread",
    ]);
    let (archive, archive13) = (d(&static_runtime(12)), d(&static_runtime(13)));

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
        &inc_sim,
        "-o",
        &d("libvt_xla_extension.so"),
        &wl.join("xla_extension.c").display().to_string(),
        &lib_dir,
        "-lcuda",
    ]);
    // Libraries that allocate from the driver themselves, by their real files' names, and
    // one of no known name.
    for (file, reserve) in [
        ("libnccl.so.2", "vt_nccl_buffers"),
        ("libcublas.so.12", "vt_cublas_workspace"),
        ("libvt_plugin.so", "vt_plugin_buffers"),
    ] {
        gcc(&[
            "-shared",
            &inc_sim,
            &format!("-DLIBRARY_RESERVE={reserve}"),
            &format!("-Wl,-soname,{file}"),
            "-o",
            &d(file),
            &wl.join("library_buffer.c").display().to_string(),
            &lib_dir,
            "-l:libcudart.so.12",
        ]);
    }
    gcc(&[
        "-shared",
        "-o",
        &d("libvt_fork_in_unload.so"),
        &wl.join("fork_in_unload_lib.c").display().to_string(),
    ]);
    // python_ctypes.py's allocation on a thread that never ran Python.
    gcc(&[
        "-shared",
        &inc_sim,
        "-o",
        &d("libvt_own_thread.so"),
        &wl.join("own_thread_lib.c").display().to_string(),
        &lib_dir,
        "-l:libcudart.so.12",
        "-lpthread",
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
            Link::DynamicRuntime13 => a.extend([&lib_dir[..], "-l:libcudart.so.13"]),
            Link::StaticRuntime13 => a.extend([&archive13[..], "-ldl"]),
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

/// The static runtime archive of a CUDA major version.
fn static_runtime(major: u32) -> String {
    match major {
        12 => "libcudart_static.a".to_string(),
        _ => format!("libcudart{major}_static.a"),
    }
}

/// Turns the recorded lookup list into `L("symbol", version, flags)` lines for runtime.c,
/// and `D("symbol")` for a function the runtime calls by its exported name (`direct`).
fn write_lookups(tsv: &Path, inc: &Path) {
    let text = fs::read_to_string(tsv).unwrap_or_else(|e| panic!("{}: {e}", tsv.display()));
    let file = tsv.file_name().unwrap_or_default().to_string_lossy();
    let mut lines = format!("/* generated by tests/build.rs from {file} */\n");
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
        if cols[0] == "direct" {
            lines.push_str(&format!("D(\"{symbol}\")\n"));
        } else {
            lines.push_str(&format!("L(\"{symbol}\", {version}, {flags})\n"));
        }
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
