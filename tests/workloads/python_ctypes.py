"""Allocations from Python through ctypes into the simulated runtime, from named functions
on known lines. Prints its ground truth like the C workloads, and one line
    VRAMTRACE_PYFRAMES [{"size": N, "gil": bool, "frames": [[file, line, function], ...]}]
with, for each allocation, the Python frames innermost first as Python itself sees them.

PyDLL keeps the GIL during the foreign call, CDLL releases it: an allocation through
CDLL is made by a thread that does not hold the GIL, whose Python frames are the same.
One more allocation is made by a thread a C library starts, which never runs Python:
its record has "own_thread": true and no frames.
"""
import ctypes
import json
import os
import sys
import threading
import traceback

runtime = ctypes.PyDLL("libcudart.so.12")
runtime_nogil = ctypes.CDLL("libcudart.so.12")
own_thread = ctypes.CDLL("libvt_own_thread.so")
records = []
live = []
calls = {}


def python_frames():
    """The caller's Python stack, innermost first, as (file, line, function), as the
    traceback module reads it."""
    caller = traceback.extract_stack()[:-1]
    return [[f.filename, f.lineno, f.name] for f in reversed(caller)]


def count(api, op, size):
    entry = calls.setdefault((api, op), [0, 0])
    entry[0] += 1
    entry[1] += size


def allocate_with_gil(size):
    pointer = ctypes.c_void_p()
    frames = python_frames(); err = runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size))  # noqa: E702
    assert err == 0, err
    records.append({"size": size, "gil": True, "frames": frames})
    count("cudaMalloc", "alloc", size)
    live.append(pointer)


def allocate_without_gil(size):
    pointer = ctypes.c_void_p()
    frames = python_frames(); err = runtime_nogil.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size))  # noqa: E702
    assert err == 0, err
    records.append({"size": size, "gil": False, "frames": frames})
    count("cudaMalloc", "alloc", size)
    live.append(pointer)


def build_model():
    allocate_with_gil(1 << 20)
    allocate_with_gil(2 << 20)


def train_step():
    build_model()
    allocate_without_gil(3 << 20)


def load_batch():
    allocate_without_gil(4 << 20)


def allocate_on_own_thread(size):
    pointer = ctypes.c_void_p()
    err = own_thread.own_thread_alloc(ctypes.byref(pointer), ctypes.c_size_t(size))
    assert err == 0, err
    records.append({"size": size, "gil": False, "own_thread": True, "frames": []})
    count("cudaMalloc", "alloc", size)
    live.append(pointer)


def main():
    if runtime.cudaSetDevice(0) != 0:
        sys.exit(2)
    train_step()
    # A thread of its own: its Python state is not the main thread's.
    loader = threading.Thread(target=load_batch)
    loader.start()
    loader.join()
    allocate_on_own_thread(5 << 20)
    peak = sum(r["size"] for r in records)
    for pointer in live:
        assert runtime.cudaFree(pointer) == 0
        count("cudaFree", "free", 0)
    print("VRAMTRACE_PYFRAMES " + json.dumps(records))
    truth = {
        "workload": "python-ctypes",
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "calls": [
            {"api": api, "op": op, "count": n, "failed": 0, "bytes": size}
            for (api, op), (n, size) in sorted(calls.items())
        ],
        "peak_live_bytes": {"0": peak},
        "peak_live_bytes_upper": {"0": peak},
        "live_bytes_at_end": {"0": 0},
        "meminfo": [],
        "threads": 3,
    }
    # Only the tests ask for it (tests/workloads/truth.h).
    if os.environ.get("WORKLOAD_TRUTH", "0") not in ("", "0"):
        print("VRAMTRACE_TRUTH " + json.dumps(truth))
    sys.stdout.flush()


main()
