//! The pytest plugin (`@pytest.mark.vram_limit`) as a user runs it, with pytest from PyPI:
//! under `vramtrace run` on the simulated GPU a marked test fails exactly when what it
//! held (its own allocations, and what was held when it began) passed its limit, by the
//! sizes the tests allocate, naming the call site; without vramtrace it measures with
//! torch where torch has a GPU (a stand-in torch here, whose peak the test sets) and else
//! skips, saying why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use vramtrace_tests::harness::{clean_env, run_within, vramtrace};
use vramtrace_tests::pages::root;

const LIMIT: Duration = Duration::from_secs(600);

/// Tests that allocate through the simulated runtime. What each holds, and so whether its
/// limit breaks, is in its name and its sizes: the ground truth.
const TRACED: &str = r#"
import ctypes, pytest
cuda = ctypes.CDLL("libcudart.so.12")
MiB = 1 << 20
held = []

def malloc(n):
    p = ctypes.c_void_p()
    assert cuda.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p

def free(p):
    assert cuda.cudaFree(p) == 0

@pytest.mark.vram_limit("4 MiB")
def test_marked_before_any_gpu_use():
    pass

def test_unmarked_may_hold_anything():
    free(malloc(64 * MiB))

def test_marks_more_than_the_views_keep():
    import vramtrace
    for _ in range(10001):
        vramtrace.mark("step")

@pytest.mark.vram_limit("4 MiB")
def test_over_by_its_own():
    free(malloc(8 * MiB))

@pytest.mark.vram_limit("4 MiB")
def test_within_after_a_larger_test():
    free(malloc(2 * MiB))

def test_keeps_three_mib():
    held.append(malloc(3 * MiB))

@pytest.mark.vram_limit("4 MiB")
def test_over_with_what_was_held():
    free(malloc(2 * MiB))

@pytest.mark.vram_limit("5 MiB")
def test_at_the_limit_with_what_was_held():
    free(malloc(2 * MiB))

@pytest.mark.vram_limit(4194304, layer="reserved")
def test_within_by_bytes_and_layer():
    pass

@pytest.mark.vram_limit("5 MiB")
@pytest.mark.vram_limit("4 MiB")
def test_over_the_tighter_of_two_limits():
    free(malloc(2 * MiB))
"#;

/// Tests whose tensors are blocks of one 16 MiB pool, annotated as a caching allocator
/// annotates them: the limit holds the allocated layer (tensors) by default.
const POOL: &str = r#"
import pytest
from annotated_pool import MiB, tensor, free

@pytest.mark.vram_limit("4 MiB")
def test_tensors_over():
    tensor(0, 3 * MiB)
    tensor(3 * MiB, 3 * MiB)
    free(0)
    free(3 * MiB)

@pytest.mark.vram_limit("4 MiB")
def test_tensors_within_a_larger_pool():
    tensor(0, 3 * MiB)
    free(0)

@pytest.mark.vram_limit("4 MiB", layer="reserved")
def test_pool_over_at_the_reserved_layer():
    tensor(0, MiB)
    free(0)
"#;

/// Tests of a program that uses torch (the stand-in) under vramtrace: the allocated layer
/// is torch's own figure, the reserved one the trace's.
const TORCH_TRACED: &str = r#"
import ctypes, pytest, torch
cuda = ctypes.CDLL("libcudart.so.12")
MiB = 1 << 20

@pytest.mark.vram_limit("4 MiB")
def test_over_by_torch_under_vramtrace():
    torch.cuda._alloc(8 * MiB)
    torch.cuda._free(8 * MiB)

@pytest.mark.vram_limit("4 MiB", layer="reserved")
def test_reserved_by_the_trace():
    p = ctypes.c_void_p()
    assert cuda.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8 * MiB)) == 0
    assert cuda.cudaFree(p) == 0
"#;

/// Tests for a run without vramtrace.
const BARE: &str = r#"
import pytest
import torch

MiB = 1 << 20

def step(n):
    torch.cuda._alloc(n)
    torch.cuda._free(n)

@pytest.mark.vram_limit("4 MiB")
def test_over_by_torch():
    step(8 * MiB)

@pytest.mark.vram_limit("4 MiB")
def test_within_by_torch():
    step(4 * MiB)

@pytest.mark.vram_limit("4 MiB", layer="reserved")
def test_reserved_needs_vramtrace():
    pass

def test_unmarked():
    pass
"#;

/// A stand-in `torch` with a GPU: `_alloc`/`_free` move its allocated bytes, and its
/// peak statistics behave as torch's do.
const STANDIN_TORCH: &str = r#"
from . import cuda
"#;
const STANDIN_CUDA: &str = r#"
_now = 0
_peak = 0
def is_available(): return True
def current_device(): return 0
def synchronize(device=None): pass
def reset_peak_memory_stats(device=None):
    global _peak
    _peak = _now
def max_memory_allocated(device=None): return _peak
def _alloc(n):
    global _now, _peak
    _now += n
    _peak = max(_peak, _now)
def _free(n):
    global _now
    _now -= n
"#;

fn pytest_python() -> PathBuf {
    vramtrace_tests::venv::python_with("pytest", "pytest>=8", "pytest")
}

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Each test's outcome as pytest's verbose lines say it (`file::name PASSED [ 50%]`).
fn outcomes(out: &Output) -> BTreeMap<String, String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let test = words.next()?.split_once("::")?.1.to_string();
            let what = words.next()?;
            matches!(what, "PASSED" | "FAILED" | "SKIPPED").then(|| (test, what.to_string()))
        })
        .collect()
}

fn expect(got: &BTreeMap<String, String>, want: &[(&str, &str)], out: &Output) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(t, o)| (t.to_string(), o.to_string()))
        .collect();
    assert_eq!(
        got,
        &want,
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `python -m pytest FILE` under `vramtrace run` on the simulated GPU, in `dir`.
fn traced_pytest(dir: &Path, file: &str) -> Output {
    let traces = dir.join(format!("traces-{file}"));
    let path = [
        root().join("python"),
        dir.join("standin"),
        vramtrace_tests::harness::script(""),
    ];
    let mut cmd = Command::new(vramtrace());
    clean_env(&mut cmd)
        .current_dir(dir)
        .env("PYTHONPATH", std::env::join_paths(path).unwrap())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["run", "--sim", "--no-torch", "-o"])
        .arg(&traces)
        .arg(pytest_python())
        .args(["-m", "pytest", "-p", "vramtrace.pytest_plugin"])
        .args(["-p", "no:cacheprovider", "-v", "-rA", file]);
    run_within(&mut cmd, LIMIT)
}

#[test]
fn vram_limit_fails_exactly_the_tests_over_their_limit_under_vramtrace() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "test_traced.py", TRACED);
    let out = traced_pytest(dir.path(), "test_traced.py");
    expect(
        &outcomes(&out),
        &[
            ("test_marked_before_any_gpu_use", "PASSED"),
            ("test_unmarked_may_hold_anything", "PASSED"),
            ("test_marks_more_than_the_views_keep", "PASSED"),
            ("test_over_by_its_own", "FAILED"),
            ("test_within_after_a_larger_test", "PASSED"),
            ("test_keeps_three_mib", "PASSED"),
            ("test_over_with_what_was_held", "FAILED"),
            ("test_at_the_limit_with_what_was_held", "PASSED"),
            ("test_within_by_bytes_and_layer", "PASSED"),
            ("test_over_the_tighter_of_two_limits", "FAILED"),
        ],
        &out,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The peaks by the tests' own sizes: 8 MiB alone; 2 MiB over the 3 MiB kept.
    for want in [
        "peak 8.0 MiB (reserved layer) in phase \"pytest test_traced.py::test_over_by_its_own\" is over --max-peak 4.0 MiB by 4.0 MiB",
        "peak 5.0 MiB (reserved layer) in phase \"pytest test_traced.py::test_over_with_what_was_held\" is over --max-peak 4.0 MiB by 1.0 MiB",
        "the most held by malloc (test_traced.py:",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    assert_eq!(out.status.code(), Some(1), "pytest exits 1 on failed tests");

    // The allocated layer, where an allocator annotates its blocks: 6 MiB of tensors in a
    // pool of 16 MiB breaks 4 MiB, 3 MiB holds; at the reserved layer the pool breaks it.
    write(dir.path(), "test_pool.py", POOL);
    let out = traced_pytest(dir.path(), "test_pool.py");
    expect(
        &outcomes(&out),
        &[
            ("test_tensors_over", "FAILED"),
            ("test_tensors_within_a_larger_pool", "PASSED"),
            ("test_pool_over_at_the_reserved_layer", "FAILED"),
        ],
        &out,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "peak 6.0 MiB (allocated layer: tensors) in phase \"pytest test_pool.py::test_tensors_over\" is over --max-peak 4.0 MiB by 2.0 MiB",
        "peak 16.0 MiB (reserved layer) in phase \"pytest test_pool.py::test_pool_over_at_the_reserved_layer\"",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }

    // torch loaded: the allocated layer is torch's figure, the reserved the trace's.
    write(
        &dir.path().join("standin"),
        "torch/__init__.py",
        STANDIN_TORCH,
    );
    write(
        &dir.path().join("standin"),
        "torch/cuda/__init__.py",
        STANDIN_CUDA,
    );
    write(dir.path(), "test_torch.py", TORCH_TRACED);
    let out = traced_pytest(dir.path(), "test_torch.py");
    expect(
        &outcomes(&out),
        &[
            ("test_over_by_torch_under_vramtrace", "FAILED"),
            ("test_reserved_by_the_trace", "FAILED"),
        ],
        &out,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "peak 8388608 bytes (allocated layer: torch.cuda.max_memory_allocated)",
        "peak 8.0 MiB (reserved layer) in phase \"pytest test_torch.py::test_reserved_by_the_trace\"",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
}

#[test]
fn vram_limit_without_vramtrace_uses_torch_or_skips() {
    let python = pytest_python();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "test_bare.py", BARE);
    let pytest = |with_torch: bool| {
        let mut path = vec![root().join("python")];
        if with_torch {
            let torch = dir.path().join("standin");
            write(&torch, "torch/__init__.py", STANDIN_TORCH);
            write(&torch, "torch/cuda/__init__.py", STANDIN_CUDA);
            path.push(torch);
        }
        let mut cmd = Command::new(&python);
        clean_env(&mut cmd)
            .current_dir(dir.path())
            .env("PYTHONPATH", std::env::join_paths(path).unwrap())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            // The simulated runtime is not loaded either: nothing here touches a GPU.
            .env_remove("LD_LIBRARY_PATH")
            .args(["-m", "pytest", "-p", "vramtrace.pytest_plugin"])
            .args(["-p", "no:cacheprovider", "-v", "-rA", "test_bare.py"]);
        run_within(&mut cmd, LIMIT)
    };
    let out = pytest(true);
    expect(
        &outcomes(&out),
        &[
            ("test_over_by_torch", "FAILED"),
            ("test_within_by_torch", "PASSED"),
            ("test_reserved_needs_vramtrace", "SKIPPED"),
            ("test_unmarked", "PASSED"),
        ],
        &out,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("peak 8388608 bytes (allocated layer: torch.cuda.max_memory_allocated) is over the limit 4 MiB (4194304 bytes)"),
        "{text}"
    );

    // No torch at all (the stand-in is not on the path, and the venv has none): the test
    // file's own `import torch` would fail, so the marked tests are in a file without it.
    write(
        dir.path(),
        "test_bare.py",
        "import pytest\n\n@pytest.mark.vram_limit('4 MiB')\ndef test_marked():\n    pass\n\ndef test_unmarked():\n    pass\n",
    );
    let out = pytest(false);
    expect(
        &outcomes(&out),
        &[("test_marked", "SKIPPED"), ("test_unmarked", "PASSED")],
        &out,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vramtrace is not loaded") && text.contains("torch with a GPU is not there"),
        "{text}"
    );
}
