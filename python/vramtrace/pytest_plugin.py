"""A GPU memory budget per test: ``@pytest.mark.vram_limit("4 GiB")``.

A marked test fails when its GPU memory peak passed the limit::

    @pytest.mark.vram_limit("4 GiB")                    # allocated layer where known
    @pytest.mark.vram_limit("6 GiB", layer="reserved")  # or reserved, or device
    def test_forward():
        ...

Under vramtrace (``vramtrace run python -m pytest``) the test is a phase of the trace,
``pytest NODEID``; after it, the trace so far is written (``vramtrace.flush``) and
``vramtrace check --phase`` holds that phase's peak to the limit, on each GPU: the peak
counts what the test held, what was held when it began included (as after
``torch.cuda.reset_peak_memory_stats``), and a broken limit names the call site that held
the most. The layer is the allocated one (tensors) where the trace has it, else reserved.

Without vramtrace loaded, where torch and a GPU are there, the peak is
``torch.cuda.max_memory_allocated`` over the test (allocated layer, after
``reset_peak_memory_stats``; no call sites); else the test is skipped, with the reason.

The plugin is registered with pytest by the installed package (entry point ``pytest11``);
from a checkout: ``python -m pytest -p vramtrace.pytest_plugin``.
"""

import json
import os
import shutil
import subprocess

import pytest

import vramtrace

_LAYERS = ("allocated", "reserved", "device")
# How long the analyzer may take to read the trace so far.
_CHECK_TIMEOUT_S = 600


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "vram_limit(limit, layer=None, device=None): fail the test if its GPU memory "
        "peak passed LIMIT (e.g. '4 GiB'); layer: allocated, reserved or device",
    )


def parse_size(text):
    """``4 GiB``, ``512MiB``, ``24G``, ``1073741824``: bytes. Units are binary, as
    ``vramtrace check`` reads them."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    t = str(text).strip()
    i = 0
    while i < len(t) and (t[i].isdigit() or t[i] == "."):
        i += 1
    shifts = {"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20,
              "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}
    unit = t[i:].strip().lower()
    try:
        value = float(t[:i])
    except ValueError:
        value = None
    if unit not in shifts or value is None or value < 0:
        raise ValueError("vram_limit: invalid size %r: use e.g. '4 GiB', '512MiB' or 1073741824" % (text,))
    return int(round(value * (1 << shifts[unit])))


class _Limit:
    def __init__(self, marker):
        if len(marker.args) != 1:
            raise pytest.UsageError("vram_limit takes one limit, e.g. vram_limit('4 GiB')")
        self.text = str(marker.args[0])
        try:
            self.bytes = parse_size(marker.args[0])
        except ValueError as e:
            raise pytest.UsageError(str(e))
        self.layer = marker.kwargs.get("layer")
        if self.layer is not None and self.layer not in _LAYERS:
            raise pytest.UsageError("vram_limit: layer must be one of %s" % ", ".join(_LAYERS))
        device = marker.kwargs.get("device")
        self.device = None if device is None else str(device)


def _torch_gpu():
    """torch, where it is installed and has a GPU; else None."""
    try:
        import torch
    except ImportError:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("vram_limit")
    if marker is None:
        return
    limit = _Limit(marker)
    if vramtrace.active():
        return
    if limit.layer not in (None, "allocated"):
        pytest.skip("vram_limit(layer=%r): vramtrace is not loaded (run the tests under "
                    "`vramtrace run`), and torch measures the allocated layer only" % limit.layer)
    if _torch_gpu() is None:
        pytest.skip("vram_limit: vramtrace is not loaded (run the tests under `vramtrace run`) "
                    "and torch with a GPU is not there to measure the peak")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("vram_limit")
    if marker is None:
        return (yield)
    limit = _Limit(marker)
    if vramtrace.active():
        name = "pytest " + item.nodeid
        vramtrace.mark(name)
        try:
            result = yield
        finally:
            vramtrace.mark("/" + name)
        _check_trace(name, limit)
        return result
    torch = _torch_gpu()
    device = int(limit.device) if limit.device is not None else torch.cuda.current_device()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = yield
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    if peak > limit.bytes:
        pytest.fail(
            "vram_limit: GPU %d: peak %d bytes (allocated layer: torch.cuda.max_memory_allocated) "
            "is over the limit %s (%d bytes) by %d bytes; run the tests under `vramtrace run` "
            "for the call sites" % (device, peak, limit.text, limit.bytes, peak - limit.bytes),
            pytrace=False,
        )
    return result


def _analyzer():
    """The vramtrace command: the one that runs these tests (``vramtrace run`` names
    itself in VRAMTRACE_BIN), else the one on PATH."""
    return os.environ.get("VRAMTRACE_BIN") or shutil.which("vramtrace")


def _analyzer_env():
    # The analyzer reads traces and touches no GPU: it runs without the interposer.
    env = dict(os.environ)
    kept = [p for p in env.get("LD_PRELOAD", "").split(":")
            if p and "libvramtrace" not in os.path.basename(p)]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def _check_trace(name, limit):
    try:
        trace = vramtrace.flush()
    except OSError as e:
        pytest.fail("vram_limit: cannot check the peak: %s" % e, pytrace=False)
    if trace is None:
        # Nothing was recorded yet in this process: no GPU memory was held at all.
        return
    analyzer = _analyzer()
    if analyzer is None:
        pytest.fail("vram_limit: cannot check the peak: no vramtrace command (set VRAMTRACE_BIN "
                    "or put vramtrace on PATH)", pytrace=False)
    args = [analyzer, "check", trace, "--phase", name, "--max-peak", str(limit.bytes), "--json"]
    if limit.layer is not None:
        args += ["--layer", limit.layer]
    if limit.device is not None:
        args += ["--device", limit.device]
    try:
        done = subprocess.run(args, capture_output=True, env=_analyzer_env(),
                              timeout=_CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail("vram_limit: cannot check the peak: %s" % e, pytrace=False)
    try:
        view = json.loads(done.stdout)
    except ValueError:
        view = None
    if done.returncode not in (0, 1) or not isinstance(view, dict):
        said = done.stderr.decode("utf-8", "replace").strip()
        pytest.fail("vram_limit: `vramtrace check` could not check the peak (exit %d): %s"
                    % (done.returncode, said), pytrace=False)
    broken = [c["message"] for c in view.get("checks", []) if c.get("broken")]
    if broken:
        pytest.fail("vram_limit %s: %s" % (limit.text, "; ".join(broken)), pytrace=False)
