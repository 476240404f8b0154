"""Markers and phases for vramtrace, from Python.

When the program runs under ``vramtrace run`` (or with ``libvramtrace.so`` preloaded),
``mark`` and ``phase`` put named points on the trace's timeline; otherwise they do
nothing, so a script can keep them in every run::

    import vramtrace

    vramtrace.mark("model loaded")
    with vramtrace.phase("forward"):
        loss = model(batch)

A phase is two markers: ``NAME`` when it begins and ``/NAME`` when it ends.
"""

import contextlib
import ctypes

__all__ = ["mark", "phase", "active"]


def _lookup():
    # The preloaded library is in the global scope, where dlsym(RTLD_DEFAULT) finds it;
    # without it the name is absent and every call is a no-op.
    try:
        fn = ctypes.CDLL(None).vramtrace_marker
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = None
    return fn


_marker = _lookup()


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
