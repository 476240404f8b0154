"""A GPU memory budget per test: ``@pytest.mark.vram_limit("4 GiB")``.

A marked test fails when its GPU memory peak passed the limit; every ``vram_limit`` on
the test, its class and its module must hold::

    @pytest.mark.vram_limit("4 GiB")                    # allocated layer where known
    @pytest.mark.vram_limit("6 GiB", layer="reserved")  # or reserved, or device
    def test_forward():
        ...

Where torch has a GPU, the allocated layer (the default) is torch's own figure:
``torch.cuda.max_memory_allocated`` over the test, after ``reset_peak_memory_stats``.

Under vramtrace (``vramtrace run python -m pytest``), the other limits, and all of them
where torch is not there, are checked on the trace: the test is a phase, ``pytest
NODEID``; after it, the trace so far is written (``vramtrace.flush``) and ``vramtrace
check --phase`` holds that phase's peak to the limit, on each GPU. The peak counts what
the test held, what was held when it began included (as after
``reset_peak_memory_stats``), and a broken limit names the call site that held the most.
Without ``layer``, the layer is the allocated one where the trace has tensors by the
test's end, else reserved: give ``layer`` for a figure that does not depend on the tests
before. The device layer is sampled (NVML): a test with no sample inside it cannot be
held to it. Only the test process's own memory counts, not its children's.

Without vramtrace loaded and without torch on a GPU, the test is skipped, with the reason.

The plugin is registered with pytest by the installed package (entry point ``pytest11``);
from a checkout: ``python -m pytest -p vramtrace.pytest_plugin``.
"""

import json
import os
import shutil
import subprocess
import sys

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
    while i < len(t) and t[i] in "0123456789.":
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
        unknown = set(marker.kwargs) - {"layer", "device"}
        if unknown:
            raise pytest.UsageError("vram_limit: unknown keyword %s (it takes layer= and device=)"
                                    % ", ".join(sorted(unknown)))
        self.text = str(marker.args[0])
        try:
            self.bytes = parse_size(marker.args[0])
        except ValueError as e:
            raise pytest.UsageError(str(e))
        if self.bytes >= 1 << 64:
            raise pytest.UsageError("vram_limit: %s is out of range" % self.text)
        self.layer = marker.kwargs.get("layer")
        if self.layer is not None and self.layer not in _LAYERS:
            raise pytest.UsageError("vram_limit: layer must be one of %s" % ", ".join(_LAYERS))
        device = marker.kwargs.get("device")
        if device is not None and not (str(device).isascii() and str(device).isdigit()):
            raise pytest.UsageError("vram_limit: device=%r: give the GPU's number (0, 1, ...)" % (device,))
        self.device = None if device is None else str(int(device))

    def by_torch(self, torch):
        """Whether torch measures this limit: torch has the GPU, and the layer is its."""
        return torch is not None and self.layer in (None, "allocated")


def _limits(item):
    """Every vram_limit on the test, its class and its module: each must hold."""
    return [_Limit(m) for m in item.iter_markers("vram_limit")]


def _torch_gpu(import_it):
    """torch, where it has a GPU: imported here only with ``import_it`` (a traced program
    that never imported torch is not made to)."""
    torch = sys.modules.get("torch")
    if torch is None and import_it:
        try:
            import torch
        except ImportError:
            return None
    if torch is None:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def pytest_runtest_setup(item):
    limits = _limits(item)
    if not limits or vramtrace.active():
        return
    if any(l.layer not in (None, "allocated") for l in limits):
        pytest.skip("vram_limit(layer=...): vramtrace is not loaded (run the tests under "
                    "`vramtrace run`), and torch measures the allocated layer only")
    if _torch_gpu(True) is None:
        pytest.skip("vram_limit: vramtrace is not loaded (run the tests under `vramtrace run`) "
                    "and torch with a GPU is not there to measure the peak")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    limits = _limits(item)
    if not limits:
        return (yield)
    # torch's own allocated figure where torch has the GPU (exact, whatever ran before);
    # the trace for the other layers, and where torch is not there.
    torch = _torch_gpu(not vramtrace.active())
    by_torch = [l for l in limits if l.by_torch(torch)]
    by_trace = [l for l in limits if not l.by_torch(torch)] if vramtrace.active() else []
    devices = sorted({int(l.device) if l.device is not None else torch.cuda.current_device()
                      for l in by_torch})
    for d in devices:
        torch.cuda.synchronize(d)
        torch.cuda.reset_peak_memory_stats(d)
    # The phase's name as the trace has it (the marker is written as UTF-8).
    name = ("pytest " + item.nodeid).encode("utf-8", "replace").decode("utf-8")
    if by_trace:
        vramtrace.mark(name)
    try:
        result = yield
    finally:
        if by_trace:
            vramtrace.mark("/" + name)
    broken = []
    for l in by_torch:
        d = int(l.device) if l.device is not None else torch.cuda.current_device()
        torch.cuda.synchronize(d)
        peak = torch.cuda.max_memory_allocated(d)
        if peak > l.bytes:
            broken.append(
                "vram_limit: GPU %d: peak %d bytes (allocated layer: torch.cuda.max_memory_allocated) "
                "is over the limit %s (%d bytes) by %d bytes%s"
                % (d, peak, l.text, l.bytes, peak - l.bytes,
                   "" if vramtrace.active() else "; run the tests under `vramtrace run` for the call sites"))
    for l in by_trace:
        broken.extend(_check_trace(name, l))
    if broken:
        pytest.fail("; ".join(broken), pytrace=False)
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
        return []
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
    return ["vram_limit %s: %s" % (limit.text, c["message"])
            for c in view.get("checks", []) if c.get("broken")]
