//! The PyTorch startup hook against a stand-in `torch` package that records the calls made
//! to it: the right calls with the right arguments, at the right moment; the user's own
//! sitecustomize still runs; a failing torch gives one warning and the program goes on; a
//! program that never imports torch sees nothing.

use std::path::Path;
use std::process::{Command, Output};
use vramtrace_analyzer::cmd::python_hook;

/// `torch`, `torch._C`, `torch.cuda`, `torch.cuda.memory`: each call appends a JSON line to
/// $STANDIN_LOG. CUDA initialises when the script calls `torch.cuda.init()`, running the
/// queued `_lazy_call`s first (as torch does). STANDIN_FAIL=record makes
/// `_record_memory_history` raise; STANDIN_OLD=1 takes `_dump_snapshot` away (as in torch
/// 2.0); STANDIN_BACKEND names the allocator backend; STANDIN_OOMS is how many
/// out-of-memory errors the script runs into.
const STANDIN: &[(&str, &str)] = &[
    (
        "torch/__init__.py",
        r#"
import json, os
def _log(call, **kw):
    kw['call'] = call
    with open(os.environ['STANDIN_LOG'], 'a') as f:
        f.write(json.dumps(kw) + '\n')
__version__ = '9.9.9-standin'
class version:
    cuda = '12.4'
_log('import torch')
from . import _C
from . import cuda
"#,
    ),
    (
        "torch/_C.py",
        r#"
import torch
observers = []
def _cuda_attach_out_of_memory_observer(fn):
    torch._log('attach_oom_observer', initialized=torch.cuda._cpp_initialized)
    observers.append(fn)
"#,
    ),
    (
        "torch/cuda/__init__.py",
        r#"
import torch
from . import memory
_initialized = False
_cpp_initialized = False
_queued = []
def is_initialized():
    return _initialized
def _lazy_call(fn):
    torch._log('lazy_call')
    if _initialized:
        fn()
    else:
        _queued.append(fn)
def init():
    global _initialized, _cpp_initialized
    torch._log('cuda init')
    _cpp_initialized = True
    for fn in _queued:
        fn()
    _initialized = True
def get_allocator_backend():
    import os
    return os.environ.get('STANDIN_BACKEND', 'native')
"#,
    ),
    (
        "torch/cuda/memory.py",
        r#"
import os, torch
def _record_memory_history(enabled='all', context='all', stacks='all', max_entries=0):
    torch._log('record_memory_history', enabled=enabled, context=context, stacks=stacks,
               max_entries=max_entries, initialized=torch.cuda._cpp_initialized)
    if os.environ.get('STANDIN_FAIL') == 'record':
        raise RuntimeError('no history in this build')
def _snapshot(device=None):
    torch._log('snapshot')
    return {'segments': [], 'device_traces': [[]]}
def _dump_snapshot(path):
    torch._log('dump_snapshot', path=path)
if os.environ.get('STANDIN_OLD'):
    del _dump_snapshot
"#,
    ),
];

const USER_SITECUSTOMIZE: &str = r#"
import os
with open(os.environ['USER_MARK'], 'w') as f:
    f.write('user sitecustomize ran\n')
"#;

const TRAIN: &str = r#"
import sys
import torch
torch.cuda.init()
# Out-of-memory errors: torch calls the observers before raising.
import os
for i in range(int(os.environ.get('STANDIN_OOMS', '1'))):
    for fn in torch._C.observers:
        fn(0, 4096 + i, 81920, 1024)
print('script done')
"#;

const NO_TORCH: &str = "print('no torch here')\n";

struct Setup {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    _hook: python_hook::PythonHook,
    hook_dir: std::path::PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    for (path, text) in STANDIN {
        let p = root.join("standin").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(root.join("user")).unwrap();
    std::fs::write(root.join("user/sitecustomize.py"), USER_SITECUSTOMIZE).unwrap();
    std::fs::write(root.join("train.py"), TRAIN).unwrap();
    std::fs::write(root.join("plain.py"), NO_TORCH).unwrap();
    std::fs::create_dir_all(root.join("traces")).unwrap();
    let hook = python_hook::write_hook().unwrap();
    let hook_dir = hook.dir.clone();
    Setup {
        _tmp: tmp,
        root,
        _hook: hook,
        hook_dir,
    }
}

fn python(s: &Setup, script: &str, env: &[(&str, &str)]) -> Output {
    let pythonpath = format!(
        "{}:{}:{}",
        s.hook_dir.display(),
        s.root.join("standin").display(),
        s.root.join("user").display()
    );
    let mut cmd = Command::new("python3");
    cmd.arg(s.root.join(script))
        .current_dir(&s.root)
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("STANDIN_LOG", s.root.join("calls.jsonl"))
        .env("USER_MARK", s.root.join("user-mark"))
        .env(
            "VRAMTRACE_OUTPUT",
            format!("{}/vramtrace-%h-%p.jsonl", s.root.join("traces").display()),
        )
        .env_remove("VRAMTRACE_TORCH")
        .env_remove("VRAMTRACE_TORCH_MAX_ENTRIES")
        .env_remove("VRAMTRACE_TORCH_OOM_SNAPSHOTS")
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn calls(s: &Setup) -> Vec<serde_json::Value> {
    std::fs::read_to_string(s.root.join("calls.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn names(calls: &[serde_json::Value]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c["call"].as_str().unwrap().to_string())
        .collect()
}

/// The files in `dir`, by name.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The `HOST-PID` of the one `torch-HOST-PID.json` in `dir` (checked against this host's
/// name and the pid the file records), and that file read.
fn torch_info(dir: &Path) -> (String, serde_json::Value) {
    let name = files(dir)
        .into_iter()
        .find(|n| n.starts_with("torch-") && n.ends_with(".json"))
        .expect("a torch-HOST-PID.json");
    let id = name["torch-".len()..name.len() - ".json".len()].to_string();
    let text = std::fs::read_to_string(dir.join(&name)).unwrap();
    let info: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        id,
        format!("{}-{}", host(), info["pid"]),
        "named by host and pid"
    );
    (id, info)
}

/// This machine's host name, as the kernel has it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim_end()
        .to_string()
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("vramtrace: warning: "))
        .collect()
}

#[test]
fn history_observer_and_snapshots_once_cuda_is_up() {
    let s = setup();
    let out = python(&s, "train.py", &[("VRAMTRACE_TORCH_MAX_ENTRIES", "1234")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "script done\n");
    assert!(
        !stderr.contains("vramtrace"),
        "no warning expected: {stderr}"
    );
    assert!(
        s.root.join("user-mark").exists(),
        "the user's sitecustomize ran"
    );

    let calls = calls(&s);
    assert_eq!(
        names(&calls),
        [
            "import torch",
            "lazy_call",
            "cuda init",
            "record_memory_history",
            "attach_oom_observer",
            "snapshot",
            "snapshot",
            "record_memory_history"
        ]
    );
    let rec = &calls[3];
    assert_eq!(rec["enabled"], "all");
    assert_eq!(rec["context"], "all");
    assert_eq!(rec["stacks"], "python");
    assert_eq!(rec["max_entries"], 1234);
    assert_eq!(rec["initialized"], true, "history only once CUDA is up");
    assert_eq!(
        calls[4]["initialized"], true,
        "observer only once CUDA is up"
    );
    assert_eq!(
        calls[7]["enabled"],
        serde_json::Value::Null,
        "history off at exit"
    );

    let traces = s.root.join("traces");
    let (id, info) = torch_info(&traces);
    let oom = format!("torch-snapshot-{id}-oom.pickle");
    let exit = format!("torch-snapshot-{id}.pickle");
    let mut expected = [format!("torch-{id}.json"), oom.clone(), exit.clone()];
    expected.sort();
    assert_eq!(files(&traces), expected);
    for name in [&oom, &exit] {
        use std::os::unix::fs::PermissionsExt;
        let path = traces.join(name);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name}");
        let snapshot = vramtrace_analyzer::snapshot::read_snapshot(&path).unwrap();
        assert_eq!(
            snapshot.device_count,
            Some(1),
            "{name}: the stand-in's snapshot"
        );
        // No segments and one empty trace: no device with anything in it.
        assert!(snapshot.devices.is_empty(), "{name}");
    }
    assert_eq!(info["torch_version"], "9.9.9-standin");
    assert_eq!(info["cuda_version"], "12.4");
    assert_eq!(info["allocator_backend"], "native");
    assert_eq!(info["max_entries"], 1234);
    assert_eq!(info["memory_history"], true);
    assert_eq!(info["ooms"][0]["allocation_bytes"], 4096);
    assert_eq!(info["ooms"][0]["device_limit_bytes"], 81920);
    assert_eq!(info["ooms"][0]["device_free_bytes"], 1024);
    assert_eq!(info["ooms"][0]["snapshot"], oom.as_str());
    assert_eq!(info["snapshots"], serde_json::json!([oom, exit]));
}

/// Code that catches out-of-memory errors and retries smaller (cuDNN's workspace search,
/// batch-size finders) can hit hundreds: each is listed, only the first gets a snapshot.
#[test]
fn repeated_out_of_memory_errors_are_listed_and_snapshotted_once() {
    let s = setup();
    let out = python(&s, "train.py", &[("STANDIN_OOMS", "5")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let traces = s.root.join("traces");
    let (id, info) = torch_info(&traces);
    let ooms = info["ooms"].as_array().unwrap();
    let sizes: Vec<u64> = ooms
        .iter()
        .map(|o| o["allocation_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [4096, 4097, 4098, 4099, 4100]);
    assert_eq!(
        ooms[0]["snapshot"],
        format!("torch-snapshot-{id}-oom.pickle")
    );
    assert!(ooms[1..].iter().all(|o| o["snapshot"].is_null()));
    assert_eq!(
        names(&calls(&s))
            .iter()
            .filter(|c| *c == "snapshot")
            .count(),
        2
    );

    // More when asked.
    let s = setup();
    let out = python(
        &s,
        "train.py",
        &[
            ("STANDIN_OOMS", "5"),
            ("VRAMTRACE_TORCH_OOM_SNAPSHOTS", "3"),
        ],
    );
    assert!(out.status.success());
    let (id, _) = torch_info(&s.root.join("traces"));
    let oom_files: Vec<String> = files(&s.root.join("traces"))
        .into_iter()
        .filter(|n| n.contains("-oom"))
        .collect();
    assert_eq!(
        oom_files,
        [
            format!("torch-snapshot-{id}-oom-2.pickle"),
            format!("torch-snapshot-{id}-oom-3.pickle"),
            format!("torch-snapshot-{id}-oom.pickle"),
        ]
    );
}

/// torch 2.0 has another `_record_memory_history` and no snapshot dump: one warning, and
/// the hook leaves memory history alone.
#[test]
fn torch_older_than_2_1_is_one_warning_and_no_history() {
    let s = setup();
    let out = python(&s, "train.py", &[("STANDIN_OLD", "1")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "script done\n");
    let w = warnings(&stderr);
    assert_eq!(w.len(), 1, "{stderr}");
    assert!(w[0].contains("older than 2.1"), "{stderr}");
    let made = names(&calls(&s));
    assert!(
        !made
            .iter()
            .any(|c| c == "record_memory_history" || c == "snapshot"),
        "{made:?}"
    );
}

/// backend:cudaMallocAsync keeps no history and refuses snapshots: one warning, none taken.
#[test]
fn the_cuda_malloc_async_backend_is_one_warning_and_no_snapshot() {
    let s = setup();
    let out = python(&s, "train.py", &[("STANDIN_BACKEND", "cudaMallocAsync")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let w = warnings(&stderr);
    assert_eq!(w.len(), 1, "{stderr}");
    assert!(w[0].contains("cudaMallocAsync"), "{stderr}");
    let made = names(&calls(&s));
    assert!(!made.iter().any(|c| c == "snapshot"), "{made:?}");
    let (_, info) = torch_info(&s.root.join("traces"));
    assert_eq!(info["allocator_backend"], "cudaMallocAsync");
}

#[test]
fn default_max_entries_is_100000() {
    let s = setup();
    let out = python(&s, "train.py", &[]);
    assert!(out.status.success());
    let calls = calls(&s);
    let rec = calls
        .iter()
        .find(|c| c["call"] == "record_memory_history")
        .unwrap();
    assert_eq!(rec["max_entries"], 100000);
}

#[test]
fn a_failing_torch_is_one_warning_and_the_program_goes_on() {
    let s = setup();
    let out = python(&s, "train.py", &[("STANDIN_FAIL", "record")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "script done\n");
    let warnings = warnings(&stderr);
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("no history in this build"), "{stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "nothing else on stderr: {stderr}"
    );
    assert!(s.root.join("user-mark").exists());
}

#[test]
fn a_program_without_torch_sees_nothing() {
    let s = setup();
    let out = python(&s, "plain.py", &[]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no torch here\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(calls(&s).is_empty(), "torch was never imported");
    assert!(
        s.root.join("user-mark").exists(),
        "the user's sitecustomize ran"
    );
    let files: Vec<_> = std::fs::read_dir(s.root.join("traces")).unwrap().collect();
    assert!(files.is_empty(), "no torch-*.json, no snapshot");
}

#[test]
fn the_off_switch_leaves_torch_alone() {
    let s = setup();
    let out = python(&s, "train.py", &[("VRAMTRACE_TORCH", "0")]);
    assert!(out.status.success());
    assert_eq!(names(&calls(&s)), ["import torch", "cuda init"]);
    assert!(s.root.join("user-mark").exists());
}

#[test]
fn python_commands_are_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("launch");
    std::fs::write(&script, "#!/usr/bin/env python3\nprint(1)\n").unwrap();
    let shell = dir.path().join("job.sh");
    std::fs::write(&shell, "#!/bin/sh\necho\n").unwrap();
    let yes = |v: &[&str]| {
        python_hook::looks_like_python(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    };
    assert!(yes(&["python3", "train.py"]));
    assert!(yes(&["/opt/conda/bin/python3.11", "-m", "x"]));
    assert!(yes(&["torchrun", "--nproc-per-node", "8", "train.py"]));
    assert!(yes(&[script.to_str().unwrap()]));
    assert!(!yes(&[shell.to_str().unwrap()]));
    assert!(!yes(&["./my_cuda_program"]));
}

#[test]
fn the_hook_directory_is_private_and_removed_after() {
    use std::os::unix::fs::PermissionsExt;
    let hook = python_hook::write_hook().unwrap();
    let dir = hook.dir.clone();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert_eq!(
        std::fs::read_to_string(dir.join("sitecustomize.py")).unwrap(),
        python_hook::SITECUSTOMIZE
    );
    drop(hook);
    assert!(!dir.exists());
}

/// As a user runs it: `vramtrace run -o DIR -- python3 train.py`. The run command adds
/// the hook itself (nothing on PYTHONPATH but the stand-in torch and the user's own
/// sitecustomize), and the snapshots land beside the traces.
#[test]
fn vramtrace_run_adds_the_hook_to_a_python_command() {
    let s = setup();
    let traces = s.root.join("run-traces");
    let pythonpath = format!(
        "{}:{}",
        s.root.join("standin").display(),
        s.root.join("user").display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .arg("run")
        .arg("-o")
        .arg(&traces)
        .args(["--", "python3"])
        .arg(s.root.join("train.py"))
        .current_dir(&s.root)
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("STANDIN_LOG", s.root.join("calls.jsonl"))
        .env("USER_MARK", s.root.join("user-mark"))
        .env_remove("VRAMTRACE_TORCH")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "script done\n");
    assert!(
        s.root.join("user-mark").exists(),
        "the user's sitecustomize ran"
    );
    let made = names(&calls(&s));
    assert!(
        made.contains(&"record_memory_history".to_string()),
        "{made:?}"
    );
    let snapshots: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("torch-snapshot-")
        })
        .collect();
    assert!(
        snapshots
            .iter()
            .any(|p| p.to_string_lossy().contains("-oom")),
        "the OOM snapshot beside the traces: {snapshots:?}"
    );

    // --no-torch: nothing is added.
    std::fs::remove_file(s.root.join("calls.jsonl")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(["run", "--no-torch", "-o"])
        .arg(s.root.join("plain-traces"))
        .args(["--", "python3"])
        .arg(s.root.join("train.py"))
        .current_dir(&s.root)
        .env("PYTHONPATH", s.root.join("standin"))
        .env("STANDIN_LOG", s.root.join("calls.jsonl"))
        .env("USER_MARK", s.root.join("user-mark"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!names(&calls(&s)).contains(&"record_memory_history".to_string()));
}

/// A Python program that execs itself keeps its pid: the second image finds the first's
/// files there and writes its own beside them (`NAME.1`), replacing none.
#[test]
fn an_execd_image_of_the_same_pid_replaces_no_file() {
    let s = setup();
    std::fs::write(
        s.root.join("exec_train.py"),
        format!(
            "{TRAIN}\nimport os, sys\nprint('image', len(sys.argv), os.getpid(), flush=True)\n\
             if len(sys.argv) == 1:\n    os.execv(sys.executable, [sys.executable, __file__, 'again'])\n"
        ),
    )
    .unwrap();
    let out = python(&s, "exec_train.py", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(warnings(&stderr).is_empty(), "{stderr}");
    // The program's own word: two images, one pid.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pids: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("image "))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{stdout}");
    assert_eq!(pids[0], pids[1]);
    let id = format!("{}-{}", host(), pids[0]);
    let traces = s.root.join("traces");
    // The first image ends at exec: no exit snapshot; the second writes one.
    let mut expected = [
        format!("torch-{id}.json"),
        format!("torch-{id}.1.json"),
        format!("torch-snapshot-{id}-oom.pickle"),
        format!("torch-snapshot-{id}-oom.1.pickle"),
        format!("torch-snapshot-{id}.pickle"),
    ];
    expected.sort();
    assert_eq!(files(&traces), expected);
    let info = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(traces.join(name)).unwrap()).unwrap()
    };
    let first = info(&format!("torch-{id}.json"));
    let second = info(&format!("torch-{id}.1.json"));
    assert_eq!(
        first["snapshots"],
        serde_json::json!([format!("torch-snapshot-{id}-oom.pickle")])
    );
    assert_eq!(
        second["ooms"][0]["snapshot"],
        format!("torch-snapshot-{id}-oom.1.pickle")
    );
    assert_eq!(
        second["snapshots"],
        serde_json::json!([
            format!("torch-snapshot-{id}-oom.1.pickle"),
            format!("torch-snapshot-{id}.pickle")
        ])
    );
}
