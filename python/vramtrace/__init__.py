"""Markers and phases for vramtrace, from Python.

When the program runs under ``vramtrace run`` (or with ``libvramtrace.so`` preloaded),
``mark`` and ``phase`` put named points on the trace's timeline; otherwise they do
nothing, so a script can keep them in every run::

    import vramtrace

    vramtrace.mark("model loaded")
    with vramtrace.phase("forward"):
        loss = model(batch)

A phase is two markers: ``NAME`` when it begins and ``/NAME`` when it ends.
``with vramtrace.category("optimizer_state"):`` names what the tensors an allocator
annotates inside are for (a phase ``category:NAME``).

``flush`` writes the trace so far and gives its path, to read it while the program runs
(the pytest plugin, ``vramtrace.pytest_plugin``, checks each marked test's peak that way).
"""

import contextlib
import ctypes

__all__ = ["mark", "phase", "category", "active", "flush"]

# The categories a program may name for its tensors (docs/json.md, Tensor categories).
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "other")


def _lookup(name, argtypes, restype):
    # The preloaded library is in the global scope, where dlsym(RTLD_DEFAULT) finds it;
    # without it the name is absent and every call is a no-op.
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


_marker = _lookup("vramtrace_marker", [ctypes.c_char_p], None)
_flush = _lookup("vramtrace_flush", [ctypes.c_char_p, ctypes.c_size_t], ctypes.c_ssize_t)


def active():
    """Whether markers reach a trace (vramtrace is loaded in this process)."""
    return _marker is not None


def mark(name):
    """A named point on the timeline ("optimizer step")."""
    if _marker is not None:
        _marker(str(name).encode("utf-8", "replace"))


@contextlib.contextmanager
def phase(name):
    """A named span: marks ``name`` on entry and ``/name`` on exit, even on an exception."""
    mark(name)
    try:
        yield
    finally:
        mark("/" + str(name))


def category(name):
    """A category range: the tensors this thread's allocator annotates inside it are of
    ``name`` (one of ``CATEGORIES``). The markers ``category:NAME`` and ``/category:NAME``."""
    if name not in CATEGORIES:
        raise ValueError("vramtrace.category: %r is not one of %s" % (name, ", ".join(CATEGORIES)))
    return phase("category:" + name)


def flush():
    """Writes everything recorded so far; returns the trace's path, or None where there is
    none (vramtrace is not loaded, or nothing was recorded yet). Raises OSError when the
    trace could not be written (vramtrace warned on stderr why)."""
    if _flush is None:
        return None
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        n = _flush(buf, size)
        if n < 0:
            raise OSError("vramtrace: the trace could not be written")
        if n == 0:
            return None
        if n < size:
            return buf.value.decode("utf-8", "surrogateescape")
        size = n + 1
