//! Running workloads under vramtrace and decoding what they left.

use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use vramtrace_schema::reader::{ReadNotes, TraceError, TraceReader};
use vramtrace_schema::{Api, Event, Header, Op, StackTable};

/// `target/<profile>/sim`, where build.rs put the simulated stack and the C workloads.
pub fn sim_dir() -> PathBuf {
    PathBuf::from(env!("VRAMTRACE_SIM_DIR"))
}

/// `target/<profile>`, where cargo put `vramtrace`, `libvramtrace.so` and Rust workloads.
pub fn bin_dir() -> PathBuf {
    sim_dir().parent().expect("sim/ has a parent").to_path_buf()
}

fn built(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace` before `cargo test --workspace` (the README's test command does both)",
        p.display()
    );
    p
}

pub fn vramtrace() -> PathBuf {
    built("vramtrace")
}

pub fn interposer() -> PathBuf {
    built("libvramtrace.so")
}

/// A workload script in the source tree (`tests/workloads/NAME`).
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workloads")
        .join(name)
}

/// The system's Python, as a user would run it.
pub fn python() -> PathBuf {
    ["/usr/bin/python3", "/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// A workload executable: a C one in `sim/`, or a Rust one beside `vramtrace`.
pub fn workload(name: &str) -> PathBuf {
    let c = sim_dir().join(name);
    if c.exists() {
        c
    } else {
        built(name)
    }
}

/// One decoded trace file.
pub struct Trace {
    pub path: PathBuf,
    pub header: Header,
    pub events: Vec<Event>,
    pub notes: ReadNotes,
    pub error: Option<TraceError>,
    /// Frames and stack nodes, read from this file alone.
    pub stacks: StackTable,
    /// Marker names by id.
    pub names: std::collections::HashMap<u64, String>,
}

impl Trace {
    pub fn read(path: &Path) -> Result<Trace, TraceError> {
        let mut reader = TraceReader::open(path)?;
        let mut events = Vec::new();
        let error = loop {
            match reader.next_event() {
                Ok(Some(e)) => events.push(e),
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        Ok(Trace {
            path: path.to_path_buf(),
            header: reader.header().clone(),
            events,
            notes: reader.notes.clone(),
            error,
            stacks: reader.stacks.clone(),
            names: reader.names.clone(),
        })
    }

    /// Events counted the way workloads count their calls: by (api, op), with failures
    /// and the bytes of successful calls that take memory or address space.
    pub fn calls(&self) -> BTreeMap<(String, String), CallCount> {
        let mut out: BTreeMap<(String, String), CallCount> = BTreeMap::new();
        for e in self.program_calls() {
            let op = e.api.op();
            let c = out
                .entry((e.api.name().to_string(), op.name().to_string()))
                .or_default();
            c.count += 1;
            if e.res != 0 {
                c.failed += 1;
            } else if matches!(
                op,
                Op::Alloc
                    | Op::Create
                    | Op::Map
                    | Op::Reserve
                    | Op::HostRegister
                    | Op::SetAccess
                    | Op::BlockAlloc
            ) {
                c.bytes += e.size;
            }
        }
        out
    }

    /// Events of calls the program made (annotations included), without the records
    /// vramtrace makes itself (NVML samples, the probe after a failed allocation).
    pub fn program_calls(&self) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(|e| !matches!(e.api, Api::NvmlSample | Api::ProbeMeminfo))
    }

    pub fn threads(&self) -> usize {
        let mut tids: Vec<u32> = self.program_calls().map(|e| e.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        tids.len()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCount {
    pub count: u64,
    pub failed: u64,
    pub bytes: u64,
}

/// What a workload run under vramtrace left behind.
pub struct Outcome {
    pub output: Output,
    pub dir: tempfile::TempDir,
    /// Ground truth lines the workload's processes printed.
    pub truths: Vec<Value>,
    pub traces: Vec<Trace>,
}

/// Workload API names as the trace records them (the identity mapping of [`check`]).
pub fn same(api: &str) -> Option<String> {
    Some(api.to_string())
}

impl Outcome {
    /// The JSON a workload printed after `prefix` (e.g. `VRAMTRACE_CHAINS `) on stdout.
    pub fn printed(&self, prefix: &str) -> Value {
        self.printed_all(prefix)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {prefix} line on stdout"))
    }

    /// The JSON of every line a workload printed after `prefix`, in order.
    pub fn printed_all(&self, prefix: &str) -> Vec<Value> {
        String::from_utf8_lossy(&self.output.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|j| serde_json::from_str(j).expect("printed JSON"))
            .collect()
    }

    /// `vramtrace ARGS... DIR` on this run's traces; its stdout, after checking it succeeded.
    pub fn view(&self, args: &[&str]) -> String {
        let out = Command::new(vramtrace())
            .args(args)
            .arg(self.dir.path())
            .output()
            .expect("vramtrace runs");
        assert!(
            out.status.success(),
            "vramtrace {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// Writes, beside the first trace, the snapshot PyTorch's hook would dump for its
    /// process (`torch-snapshot-PID.pickle`): `script` is Python given the path and the
    /// trace's start in Unix ns.
    pub fn write_hook_snapshot(&self, script: &str) -> PathBuf {
        let header = &self.traces[0].header;
        let path = self
            .dir
            .path()
            .join(format!("torch-snapshot-{}.pickle", header.pid));
        let ok = Command::new(python())
            .args(["-c", script])
            .arg(&path)
            .arg(header.start_unix_ns.to_string())
            .status()
            .expect("python runs")
            .success();
        assert!(ok, "the snapshot script failed");
        path
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The truth printed by the process with this pid and workload name.
    pub fn truth(&self, workload: &str) -> &Value {
        let found: Vec<&Value> = self
            .truths
            .iter()
            .filter(|t| t["workload"] == workload)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "exactly one truth for {workload}: {:?}",
            self.truths
        );
        found[0]
    }

    /// The trace of the process image that printed `truth` (same pid, same executable).
    pub fn trace_for(&self, truth: &Value) -> &Trace {
        let pid = truth["pid"].as_u64().expect("truth has a pid") as u32;
        let found: Vec<&Trace> = self.traces.iter().filter(|t| t.header.pid == pid).collect();
        match found.len() {
            1 => found[0],
            0 => panic!(
                "no trace for pid {pid}; traces: {:?}",
                self.traces.iter().map(|t| &t.path).collect::<Vec<_>>()
            ),
            _ => {
                // An exec keeps the pid: tell the images apart by what they ran.
                let wl = truth["workload"]
                    .as_str()
                    .unwrap_or_default()
                    .replace('-', "_");
                found
                    .into_iter()
                    .find(|t| {
                        t.header.exe.ends_with(&wl)
                            || t.header.argv.first().is_some_and(|a| a.ends_with(&wl))
                    })
                    .unwrap_or_else(|| panic!("several traces for pid {pid}, none for {wl}"))
            }
        }
    }

    /// `vramtrace summary --json` of the run.
    pub fn summary(&self) -> Value {
        summary_of(self.dir.path())
    }
}

/// Removes from `cmd`'s environment what would change a traced run if the shell running
/// the tests had it set: every `VRAMTRACE_*` setting, the variables a trace records
/// ([`vramtrace_schema::ENV_KEYS`]), the allocator settings, and `LD_PRELOAD`; and asks
/// the workloads for their ground truth ([`crate::truth::ENV`]). Tests set what they need
/// after this.
pub fn clean_env(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("VRAMTRACE_") {
            cmd.env_remove(&key);
        }
    }
    for key in vramtrace_schema::ENV_KEYS {
        cmd.env_remove(key);
    }
    cmd.env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("LD_PRELOAD")
        .env(crate::truth::ENV, "1")
}

/// [`run_within`], which must succeed: else the test fails with `what`, the status and
/// both outputs.
pub fn succeeds(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    let out = run_within(cmd, limit);
    assert!(
        out.status.success(),
        "{what}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` to its end, or kills it after `limit` and fails: a hang is a deadlock.
pub fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the workload starts");
    wait_within(child, limit, &format!("{cmd:?}"))
}

fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the workload") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}: deadlock or hang");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// `vramtrace summary --json DIR`, which must succeed.
pub fn summary_of(dir: &Path) -> Value {
    let out = Command::new(vramtrace())
        .args(["summary", "--json"])
        .arg(dir)
        .output()
        .expect("vramtrace summary runs");
    assert!(
        out.status.success(),
        "summary failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("summary --json is JSON")
}

/// The trace files in `dir`, sorted.
pub fn trace_paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("output directory exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    paths.sort();
    paths
}

/// Runs `vramtrace run --sim [vt_args] -- WORKLOAD args` with `env` set.
pub fn run_sim(
    workload_name: &str,
    args: &[&str],
    vt_args: &[&str],
    env: &[(&str, &str)],
) -> Outcome {
    let program = workload(workload_name);
    let mut command: Vec<&OsStr> = vec![program.as_os_str()];
    command.extend(args.iter().map(OsStr::new));
    run_sim_command(&command, vt_args, env)
}

/// The longest a traced run may take before it counts as hung (the longest default
/// test takes under a minute in a debug build on two cores).
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// Runs `vramtrace run --sim [vt_args] -- COMMAND...` with `env` set.
pub fn run_sim_command(command: &[&OsStr], vt_args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .arg("run")
        .arg("--sim")
        .arg("-o")
        .arg(dir.path())
        .args(vt_args)
        .arg("--");
    cmd.args(command);
    for (k, v) in env {
        cmd.env(k, v);
    }
    finish(run_within(&mut cmd, RUN_LIMIT), dir)
}

/// Collects truths and traces after a run whose traces are in `dir`.
pub fn finish(output: Output, dir: tempfile::TempDir) -> Outcome {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let truths = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(crate::truth::PREFIX))
        .map(|j| serde_json::from_str(j).expect("truth is JSON"))
        .collect();
    let paths = trace_paths(dir.path());
    let traces = paths
        .iter()
        .map(|p| Trace::read(p).unwrap_or_else(|e| panic!("trace {} unreadable: {e}", p.display())))
        .collect();
    Outcome {
        output,
        dir,
        truths,
        traces,
    }
}

/// The workload's calls as it counted them, with API names mapped by `rename` (a static
/// runtime shows driver names: `cudaMalloc` is seen as `cuMemAlloc_v2`).
pub fn expected_calls(
    truth: &Value,
    rename: impl Fn(&str) -> Option<String>,
) -> BTreeMap<(String, String), CallCount> {
    let mut out: BTreeMap<(String, String), CallCount> = BTreeMap::new();
    for c in truth["calls"].as_array().expect("truth has calls") {
        let api = c["api"].as_str().expect("call api");
        let Some(api) = rename(api) else { continue };
        let e = out
            .entry((api, c["op"].as_str().expect("call op").to_string()))
            .or_default();
        e.count += c["count"].as_u64().unwrap();
        e.failed += c["failed"].as_u64().unwrap();
        e.bytes += c["bytes"].as_u64().unwrap();
    }
    out
}

/// Per-device figure from a truth object (`{"0": bytes}`).
pub fn per_device(truth: &Value, key: &str) -> BTreeMap<i64, u64> {
    truth[key]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(d, b)| (d.parse().unwrap(), b.as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

/// Compares one process's trace with the ground truth its workload printed: every call
/// present exactly once (counts, failures, bytes per API), the same threads, the same
/// `cuMemGetInfo` answers; and the analyzer's peak and end figures with the workload's
/// own bookkeeping (exact, or within the workload's bounds when threads race).
pub fn check(outcome: &Outcome, truth: &Value, rename: impl Fn(&str) -> Option<String>) {
    let trace = outcome.trace_for(truth);
    let name = truth["workload"].as_str().unwrap_or("?");
    assert!(
        trace.error.is_none(),
        "{name}: trace error {:?}",
        trace.error
    );
    assert_eq!(
        trace.calls(),
        expected_calls(truth, rename),
        "{name}: calls by API"
    );
    assert_eq!(
        trace.threads() as u64,
        truth["threads"].as_u64().unwrap(),
        "{name}: threads that made memory calls"
    );
    let meminfo: Vec<(u64, u64)> = trace
        .program_calls()
        .filter(|e| e.api.op() == Op::Meminfo && e.ok())
        .map(|e| (e.free.unwrap(), e.total.unwrap()))
        .collect();
    let expected_meminfo: Vec<(u64, u64)> = truth["meminfo"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| (m["free"].as_u64().unwrap(), m["total"].as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(meminfo, expected_meminfo, "{name}: cuMemGetInfo answers");

    let summary = outcome.summary();
    let process = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| Path::new(p["path"].as_str().unwrap()) == trace.path)
        .unwrap_or_else(|| {
            panic!(
                "{name}: summary has no process for {}",
                trace.path.display()
            )
        });
    let lower = per_device(truth, "peak_live_bytes");
    let upper = per_device(truth, "peak_live_bytes_upper");
    let at_end = per_device(truth, "live_bytes_at_end");
    let devices = process["devices"].as_array().unwrap();
    for (dev, low) in &lower {
        let high = upper.get(dev).copied().unwrap_or(*low);
        let d = devices.iter().find(|d| d["device"].as_i64() == Some(*dev));
        let peak = d
            .map(|d| d["peak_reserved_bytes"].as_u64().unwrap())
            .unwrap_or(0);
        let end = d
            .map(|d| d["reserved_bytes_at_end"].as_u64().unwrap())
            .unwrap_or(0);
        assert!(
            (*low..=high).contains(&peak),
            "{name}: device {dev} peak {peak} outside the workload's [{low}, {high}]"
        );
        assert_eq!(
            end,
            at_end.get(dev).copied().unwrap_or(0),
            "{name}: device {dev} bytes live at the end"
        );
    }
    // And no device the workload never used.
    for d in devices {
        let dev = d["device"].as_i64().unwrap();
        let peak = d["peak_reserved_bytes"].as_u64().unwrap();
        assert!(
            peak == 0 || lower.contains_key(&dev),
            "{name}: device {dev} holds {peak} bytes in the summary, none in the truth"
        );
    }
}

/// Maps runtime API names to the driver call a static runtime makes for them: no
/// `cudaMalloc` symbol exists to interpose, so only the driver call is seen.
pub fn static_runtime_names(api: &str) -> Option<String> {
    let driver = match api {
        "cudaMalloc" => "cuMemAlloc_v2",
        "cudaFree" => "cuMemFree_v2",
        "cudaMallocManaged" => "cuMemAllocManaged",
        "cudaMallocPitch" => "cuMemAllocPitch_v2",
        "cudaMallocHost" | "cudaHostAlloc" => "cuMemHostAlloc",
        "cudaFreeHost" => "cuMemFreeHost",
        "cudaMallocAsync" => "cuMemAllocAsync",
        "cudaFreeAsync" => "cuMemFreeAsync",
        "cudaMallocFromPoolAsync" => "cuMemAllocFromPoolAsync",
        "cudaMemPoolCreate" => "cuMemPoolCreate",
        "cudaMemPoolDestroy" => "cuMemPoolDestroy",
        "cudaMemPoolTrimTo" => "cuMemPoolTrimTo",
        "cudaMemGetDefaultMemPool" => "cuMemGetDefaultMemPool",
        "cudaMemGetMemPool" => "cuMemGetMemPool",
        "cudaMemGetInfo" => "cuMemGetInfo_v2",
        other => other,
    };
    Some(driver.to_string())
}
