//! `vramtrace run` as a newcomer types it: no `--` before the command, two runs into one
//! directory, sizes written as Slurm and Docker write them, and a machine without a GPU.

use std::process::{Command, Output};
use std::time::Duration;
use vramtrace_tests::harness::{clean_env, finish, run_within, vramtrace, workload, Outcome};

const LIMIT: Duration = Duration::from_secs(300);

/// `vramtrace run --sim [vt_args] DEMO` into `dir`, with no `--` before the command.
fn demo_into(dir: &std::path::Path, vt_args: &[&str]) -> std::process::Output {
    demo_with(dir, vt_args, &[])
}

/// [`demo_into`] with launcher variables set.
fn demo_with(
    dir: &std::path::Path,
    vt_args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .args(["run", "--sim", "-o"])
        .arg(dir)
        .args(vt_args)
        .arg(workload("demo"))
        .envs(env.iter().copied());
    run_within(&mut cmd, LIMIT)
}

fn summary(dir: &std::path::Path, extra: &[&str]) -> (serde_json::Value, String) {
    let out = Command::new(vramtrace())
        .args(["summary", "--json"])
        .args(extra)
        .arg(dir)
        .output()
        .expect("vramtrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).expect("JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn peak_of(summary: &serde_json::Value) -> u64 {
    let devices = summary["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1, "{summary}");
    devices[0]["peak_reserved_bytes"].as_u64().expect("peak")
}

fn truth_peak(run: &Outcome) -> u64 {
    run.truth("demo")["peak_live_bytes"]["0"]
        .as_u64()
        .expect("the demo prints its peak")
}

#[test]
fn run_takes_the_command_without_dashes_and_reads_g_as_gib() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo_into(dir.path(), &["--sim-capacity", "24G"]);
    let run = finish(out, dir);
    // The demo runs the card out of memory on purpose, and exits 1.
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr());
    let total = run.truth("demo")["meminfo"][0]["total"].as_u64().unwrap();
    assert_eq!(
        total,
        24 << 30,
        "24G is 24 GiB, as Slurm and Docker read it"
    );
    assert_eq!(peak_of(&run.summary()), truth_peak(&run));
}

/// `--version` names the release and the trace format, as the traces this build writes
/// carry it in their first line.
#[test]
fn version_names_the_release_and_the_trace_format_its_traces_carry() {
    let dir = tempfile::tempdir().unwrap();
    demo_into(dir.path(), &["--sim-capacity", "24GiB"]);
    let trace = vramtrace_tests::harness::trace_paths(dir.path())
        .pop()
        .expect("the demo left a trace");
    let text = std::fs::read_to_string(trace).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let format = header["version"]
        .as_u64()
        .expect("the header has a version");
    for flag in ["--version", "-V"] {
        let out = Command::new(vramtrace()).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!(
                "vramtrace {} (trace format {format})",
                env!("CARGO_PKG_VERSION")
            ),
            "{flag}"
        );
    }
}

/// The subcommands `vramtrace --help` lists.
fn subcommands() -> Vec<String> {
    let help = Command::new(vramtrace()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    help.split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    let commands = subcommands();
    assert!(commands.len() > 10, "{commands:?}");
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(vramtrace())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for c in &commands {
            // Each shell's own form of a subcommand, not any word that holds its name
            // (`--run`, `--max-peak`, "command" would).
            let form = match shell {
                "bash" => format!("cmd=\"vramtrace__subcmd__{c}\""),
                "zsh" => format!("'{c}:"),
                _ => format!("-a \"{c}\""),
            };
            assert!(
                script.contains(&form),
                "{shell} completions lack {c} ({form})"
            );
        }
        assert!(script.contains("max-peak"), "{shell}: check's options");
    }
    let dir = tempfile::tempdir().unwrap();
    let man = |extra: &[&str]| {
        Command::new(vramtrace())
            .args(["man", "-o"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap()
    };
    assert!(man(&[]).status.success());
    use std::os::unix::fs::PermissionsExt;
    for c in std::iter::once("vramtrace".to_string())
        .chain(commands.iter().map(|c| format!("vramtrace-{c}")))
    {
        let page = dir.path().join(format!("{c}.1"));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{page:?}: {e}"));
        assert!(text.contains(".TH"), "{page:?} is not a man page");
        let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{page:?}");
    }
    // Never written over without --force.
    assert_eq!(man(&[]).status.code(), Some(2));
    assert!(man(&["--force"]).status.success());
}

#[test]
fn a_simulated_card_of_no_memory_is_refused() {
    for size in ["0", "0G", "0.0001"] {
        let dir = tempfile::tempdir().unwrap();
        let out = demo_into(&dir.path().join("traces"), &["--sim-capacity", size]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{size}: {said}");
        assert!(said.contains("--sim-capacity"), "{size}: {said}");
    }
}

#[test]
fn a_simulated_run_without_cuda_calls_says_why_it_left_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .args(["run", "--sim", "-o"])
        .arg(dir.path())
        .arg("true");
    let out = run_within(&mut cmd, LIMIT);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("0 trace files"), "{said}");
    assert!(said.contains("made no CUDA call"), "{said}");
}

#[test]
fn a_run_that_left_no_trace_leaves_no_directory_it_named_itself() {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .current_dir(cwd.path())
        .args(["run", "--sim", "true"]);
    let out = run_within(&mut cmd, LIMIT);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("0 trace files"), "{said}");
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}: {said}");
}

#[test]
fn two_runs_in_one_directory_are_never_summed() {
    let dir = tempfile::tempdir().unwrap();
    let first = demo_into(dir.path(), &["--sim-capacity", "24GiB"]);
    let second = demo_into(dir.path(), &["--sim-capacity", "16GiB"]);
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already holds 1 trace of another run"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let (first_peak, second_peak) = (printed_peak(&first), printed_peak(&second));
    assert_ne!(first_peak, second_peak, "the two runs must be told apart");

    // The newest run, saying so.
    let (newest, said) = summary(dir.path(), &[]);
    assert_eq!(peak_of(&newest), second_peak);
    assert!(
        said.contains("holds 2 runs") && said.contains("--run"),
        "{said}"
    );

    // The older one, chosen by its id (the one its trace header records).
    let older_id = vramtrace_tests::harness::trace_paths(dir.path())
        .iter()
        .map(|p| vramtrace_tests::harness::Trace::read(p).unwrap())
        .min_by_key(|t| t.header.start_unix_ns)
        .and_then(|t| t.header.env.get("VRAMTRACE_RUN_ID").cloned())
        .expect("the run id is in the header");
    let (older, _) = summary(dir.path(), &["--run", &older_id]);
    assert_eq!(peak_of(&older), first_peak);
}

#[test]
fn traces_without_a_run_id_are_a_run_that_can_be_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let older = tempfile::tempdir().unwrap();
    let first = demo_into(older.path(), &["--sim-capacity", "16GiB"]);
    // The older run as LD_PRELOAD alone writes it: a header without a run id.
    for path in vramtrace_tests::harness::trace_paths(older.path()) {
        let text = std::fs::read_to_string(&path).unwrap();
        let (header, rest) = text.split_once('\n').unwrap();
        let mut header: serde_json::Value = serde_json::from_str(header).unwrap();
        let env = header["env"].as_object_mut().expect("env");
        assert!(env.remove("VRAMTRACE_RUN_ID").is_some(), "{header}");
        let copy = dir.path().join(path.file_name().unwrap());
        std::fs::write(copy, format!("{header}\n{rest}")).unwrap();
    }
    let second = demo_into(dir.path(), &["--sim-capacity", "24GiB"]);
    let (first_peak, second_peak) = (printed_peak(&first), printed_peak(&second));
    assert_ne!(first_peak, second_peak, "the two runs must be told apart");

    let (newest, said) = summary(dir.path(), &[]);
    assert_eq!(peak_of(&newest), second_peak);
    assert!(said.contains("unnamed"), "{said}");
    let (unnamed, _) = summary(dir.path(), &["--run", "unnamed"]);
    assert_eq!(peak_of(&unnamed), first_peak);
}

#[test]
fn a_trace_without_a_readable_header_is_reported_not_taken_for_a_run() {
    let dir = tempfile::tempdir().unwrap();
    demo_into(dir.path(), &["--sim-capacity", "24GiB"]);
    demo_into(dir.path(), &["--sim-capacity", "16GiB"]);
    // A process killed before it wrote its header.
    let cut = dir.path().join("vramtrace-cut-1.jsonl");
    std::fs::write(&cut, b"{\"format\":\"vramt").unwrap();
    let out = Command::new(vramtrace())
        .args(["summary", "--json"])
        .arg(dir.path())
        .output()
        .expect("vramtrace runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("holds 2 runs"), "{said}");
    assert!(said.contains("vramtrace-cut-1.jsonl"), "{said}");
    assert_eq!(out.status.code(), Some(1), "{said}");
}

#[test]
fn a_run_without_a_gpu_says_why_and_names_sim() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .args(["run", "-o"])
        .arg(dir.path())
        .arg("true");
    let out = run_within(&mut cmd, LIMIT);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Whether this machine has a driver, asked of the loader's cache, not of vramtrace.
    let ldconfig = Command::new("/sbin/ldconfig").arg("-p").output();
    let has_driver =
        ldconfig.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"));
    if has_driver {
        assert!(stderr.contains("made no CUDA call"), "{stderr}");
    } else {
        assert!(
            stderr.contains("no NVIDIA driver") && stderr.contains("--sim"),
            "{stderr}"
        );
    }
    assert!(!stderr.contains("see `vramtrace summary"), "{stderr}");
}

/// The demo run once, for the compression and pack tests: its directory and its peak as
/// the workload counted it.
fn demo_run() -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let out = demo_into(&dir.path().join("traces"), &["--sim-capacity", "24GiB"]);
    let peak = printed_peak(&out);
    (dir, peak)
}

fn shell(script: &str, dir: &std::path::Path) {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `vramtrace pack EXTRA -o OUT INPUT`, which must succeed.
fn pack(extra: &[&str], out: &std::path::Path, input: &std::path::Path) {
    let done = pack_output(extra, out, input);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
}

fn pack_output(extra: &[&str], out: &std::path::Path, input: &std::path::Path) -> Output {
    Command::new(vramtrace())
        .arg("pack")
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(input)
        .output()
        .unwrap()
}

/// Unpacks `NAME` in `dir` into `dir/out` with the ordinary tools, not with vramtrace.
fn unpack_with_tools(dir: &std::path::Path, name: &str) {
    shell(
        &format!("mkdir out && zstd -dc {name} | tar -x -C out"),
        dir,
    );
}

/// The demo's peak on device 0, as the demo printed it.
fn printed_peak(out: &Output) -> u64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(vramtrace_tests::truth::PREFIX))
        .expect("a truth line");
    let truth: serde_json::Value = serde_json::from_str(line).unwrap();
    truth["peak_live_bytes"]["0"].as_u64().unwrap()
}

#[test]
fn compressed_traces_read_as_they_are() {
    let (dir, peak) = demo_run();
    // Compressed by the ordinary tools, not by vramtrace.
    shell(
        "mkdir gz zst && for f in traces/*.jsonl; do b=$(basename $f); \
         gzip -c $f > gz/$b.gz; zstd -q $f -o zst/$b.zst; done",
        dir.path(),
    );
    for sub in ["gz", "zst"] {
        let (s, _) = summary(&dir.path().join(sub), &[]);
        assert_eq!(peak_of(&s), peak, "{sub}");
        let file = std::fs::read_dir(dir.path().join(sub))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let (s, _) = summary(&file, &[]);
        assert_eq!(peak_of(&s), peak, "{}", file.display());
    }
    // Two traces joined by `cat` decompress as one stream: the first is read, the join is
    // named with its line, and the second is never taken for more of the same process.
    shell("cat gz/*.gz gz/*.gz > joined.jsonl.gz", dir.path());
    let out = Command::new(vramtrace())
        .args(["summary", "--json"])
        .arg(dir.path().join("joined.jsonl.gz"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("joined.jsonl.gz:") && said.contains("second trace header"),
        "{said}"
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(peak_of(&s), peak);
}

#[test]
fn a_pack_reads_as_its_run_and_redact_takes_out_host_argv_and_paths() {
    let (dir, peak) = demo_run();
    let traces = dir.path().join("traces");
    pack(&[], &dir.path().join("run.vtpack"), &traces);
    pack(&["--redact"], &dir.path().join("redacted.vtpack"), &traces);
    for name in ["run.vtpack", "redacted.vtpack"] {
        let pack = dir.path().join(name);
        let (s, _) = summary(&pack, &[]);
        assert_eq!(peak_of(&s), peak, "{name}");
        // Files are named as members of the pack, never by the directory it was unpacked to.
        for p in s["processes"].as_array().expect("processes") {
            let path = p["path"].as_str().expect("path");
            assert!(path.starts_with(&format!("{}/", pack.display())), "{path}");
        }
    }
    // Never over an existing file.
    let again = pack_output(&[], &dir.path().join("run.vtpack"), &traces);
    assert!(!again.status.success());

    // Unpacked by the ordinary tools: nothing of the host, the command line or the paths.
    unpack_with_tools(dir.path(), "redacted.vtpack");
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let host = host.trim();
    let workload_path = workload("demo").display().to_string();
    for entry in std::fs::read_dir(dir.path().join("out")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains(&format!("-{host}-")), "{name}");
        assert!(
            !text.contains(&workload_path),
            "the command's path in {name}"
        );
        assert!(
            !text.contains(env!("CARGO_MANIFEST_DIR")),
            "a source path in {name}"
        );
        let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_ne!(header["host"].as_str(), Some(host), "{name}");
        assert_eq!(header["argv"].as_array().unwrap().len(), 1, "{name}");
        for line in text.lines().filter(|l| l.starts_with("{\"frame\":")) {
            let frame: serde_json::Value = serde_json::from_str(line).unwrap();
            for key in ["module", "file"] {
                let v = frame["frame"][key].as_str().unwrap_or_default();
                assert!(!v.contains('/'), "{key} {v} in {name}");
            }
        }
    }
}

#[test]
fn redact_renames_the_host_in_the_snapshot_names_torch_json_lists() {
    let (dir, _) = demo_run();
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let host = host.trim();
    let snapshot = format!("torch-snapshot-{host}-4242-oom.pickle");
    let info = serde_json::json!({
        "pid": 4242,
        "snapshots": [snapshot],
        "ooms": [{"device": 0, "snapshot": snapshot}],
    });
    std::fs::write(
        dir.path().join(format!("traces/torch-{host}-4242.json")),
        info.to_string(),
    )
    .unwrap();
    pack(
        &["--redact"],
        &dir.path().join("redacted.vtpack"),
        &dir.path().join("traces"),
    );
    unpack_with_tools(dir.path(), "redacted.vtpack");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir.path().join("out")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("torch-") {
            seen += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains(&format!("-{host}-")), "{name}: {text}");
            assert!(
                text.contains("torch-snapshot-host-1-4242-oom.pickle"),
                "{text}"
            );
        }
    }
    assert_eq!(seen, 1);
}

#[test]
fn a_pack_s_reading_errors_name_the_pack_not_where_it_was_unpacked() {
    let (dir, _) = demo_run();
    shell(
        "mkdir cut && for f in traces/*.jsonl; do head -c 20000 $f > cut/$(basename $f); \
         echo garbage >> cut/$(basename $f); done",
        dir.path(),
    );
    pack(&[], &dir.path().join("cut.vtpack"), &dir.path().join("cut"));
    let out = Command::new(vramtrace())
        .arg("summary")
        .arg(dir.path().join("cut.vtpack"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("cut.vtpack/vramtrace-"), "{said}");
    assert!(!said.contains("vramtrace-pack-"), "{said}");
}

#[test]
fn redact_takes_the_paths_out_of_inlined_calls_too() {
    let run = vramtrace_tests::harness::run_sim("inlined", &[], &[], &[]);
    pack(
        &["--redact"],
        &run.dir.path().join("run.vtpack"),
        run.dir.path(),
    );
    unpack_with_tools(run.dir.path(), "run.vtpack");
    let mut inlined_calls = 0;
    for entry in std::fs::read_dir(run.dir.path().join("out")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines().filter(|l| l.starts_with("{\"frame\":")) {
            let frame: serde_json::Value = serde_json::from_str(line).unwrap();
            for call in frame["frame"]["inlined"].as_array().into_iter().flatten() {
                inlined_calls += 1;
                let file = call["file"].as_str().unwrap_or_default();
                assert!(!file.contains('/'), "inlined call's file {file}");
            }
        }
    }
    assert!(inlined_calls > 0, "the workload's helper is inlined");
}

/// Sequential runs of one Slurm job (no step: the batch script) or with torchrun's default
/// run id `none` are separate runs; the nodes of one `srun` step are one.
#[test]
fn launcher_ids_join_a_step_never_sequential_runs() {
    for env in [
        &[("SLURM_JOB_ID", "77")][..],
        &[("TORCHELASTIC_RUN_ID", "none")][..],
    ] {
        let dir = tempfile::tempdir().unwrap();
        demo_with(dir.path(), &["--sim-capacity", "24GiB"], env);
        let second = demo_with(dir.path(), &["--sim-capacity", "16GiB"], env);
        let (s, said) = summary(dir.path(), &[]);
        assert!(said.contains("holds 2 runs"), "{env:?}: {said}");
        assert_eq!(peak_of(&s), printed_peak(&second));
    }
    // One step on two nodes: one run, the two processes side by side.
    let dir = tempfile::tempdir().unwrap();
    let step = [("SLURM_JOB_ID", "77"), ("SLURM_STEP_ID", "0")];
    demo_with(dir.path(), &["--sim-capacity", "24GiB"], &step);
    demo_with(dir.path(), &["--sim-capacity", "16GiB"], &step);
    let (s, said) = summary(dir.path(), &[]);
    assert!(!said.contains("runs"), "{said}");
    assert_eq!(s["processes"].as_array().unwrap().len(), 2);
}
