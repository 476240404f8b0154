# vramtrace's startup hook for PyTorch programs.
#
# `vramtrace run` writes this file into a private directory that it puts first on
# PYTHONPATH, so every Python process of the run imports it at startup (as `sitecustomize`).
# It then:
#   - runs the user's own `sitecustomize`, if there is one further along sys.path;
#   - waits for the program to import `torch` (it never imports torch itself), and then
#       * once CUDA is initialised, turns on the caching allocator's memory history
#         (python stacks, VRAMTRACE_TORCH_MAX_ENTRIES entries, default 100000) and attaches
#         an out-of-memory observer that writes a snapshot before the exception propagates
#         (the first VRAMTRACE_TORCH_OOM_SNAPSHOTS out-of-memory errors, default 1: code
#         that catches them and retries smaller, as cuDNN's workspace search does, can hit
#         hundreds; every one is listed in torch-<host>-<pid>.json, and the exit
#         snapshot's history holds them all);
#       * writes a snapshot at exit, then turns the history off;
#       * records the torch version and allocator settings in torch-<host>-<pid>.json;
#       * puts in each snapshot it writes which CUDA storages are parameters, buffers,
#         gradients and optimizer state (key "vramtrace_tensors": the modules and
#         optimizers the garbage collector knows, walked for about 2 s at most).
#   Files go beside the trace (the directory of VRAMTRACE_OUTPUT), named by host and pid as
#   the traces are (a directory shared by several nodes holds the same pids many times),
#   created new with mode 0600, never through a symlink or over an existing file: a name
#   that is taken (an exec'd image of the same pid) gets NAME.1, NAME.2, ...
#   torch older than 2.1 (another history API, no snapshot dump) and the cudaMallocAsync
#   backend (no history) get one warning and no snapshots.
# Nothing here may break the program: every failure is one line on stderr,
# `vramtrace: warning: ...`, and the program goes on. VRAMTRACE_TORCH=0 turns it off.

import os as _os
import sys as _sys


def _vramtrace_sanitized(value):
    # As the interposer fills %h and %r (interposer/src/output.rs), so that these files go
    # beside its traces: a host name or rank only fills part of one file name. "/",
    # control characters and ".." become "_"; an empty value is "_".
    import unicodedata

    value = "".join("_" if c == "/" or unicodedata.category(c) == "Cc" else c for c in value)
    return value.replace("..", "__") or "_"


def _vramtrace_torch_hook():
    state = {
        "warned": set(),
        "torch_done": False,
        "active": False,
        "snapshots": True,
        "oom_snapshots": 1,
        "ooms": 0,
        "writes": 0,
        "info": {},
    }
    our_dir = _os.path.dirname(_os.path.abspath(__file__))

    def warn(msg):
        if msg in state["warned"]:
            return
        state["warned"].add(msg)
        try:
            _sys.stderr.write("vramtrace: warning: %s\n" % msg)
            _sys.stderr.flush()
        except Exception:
            pass

    def guarded(what, fn, *args):
        try:
            return fn(*args)
        except BaseException as e:  # never into the user's program
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            warn("%s failed: %s: %s" % (what, type(e).__name__, e))
            return None

    # -- the user's own sitecustomize ------------------------------------------------
    def chain_user_sitecustomize():
        import importlib.machinery
        import importlib.util

        def same(a, b):
            try:
                return _os.path.samefile(a or ".", b)
            except OSError:
                return False

        entries = list(_sys.path)
        ours = [i for i, p in enumerate(entries) if same(p, our_dir)]
        rest = entries[ours[0] + 1:] if ours else entries
        rest = [p for p in rest if not same(p, our_dir)]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            # What site.py itself does with a failing sitecustomize: say so, go on.
            warn("your sitecustomize (%s) raised %s: %s" % (spec.origin, type(e).__name__, e))

    # -- where files go ----------------------------------------------------------------
    def host_name():
        try:
            return _os.uname()[1]
        except Exception:
            return ""

    def output_dir():
        pattern = _os.environ.get("VRAMTRACE_OUTPUT", "")
        if not pattern:
            return _os.getcwd()
        d = pattern if pattern.endswith("/") else _os.path.dirname(pattern)
        if not d:
            return _os.getcwd()
        host = host_name()
        d = (
            d.replace("%%", "\0")
            .replace("%p", str(_os.getpid()))
            .replace("%h", _vramtrace_sanitized(host))
            .replace("%r", _vramtrace_sanitized(_os.environ.get("RANK", "0")))
            .replace("\0", "%")
        )
        return d

    def env_int(name, default, minimum):
        raw = _os.environ.get(name, "")
        if raw == "":
            return default
        try:
            n = int(raw)
            if n >= minimum:
                return n
        except ValueError:
            pass
        warn("%s=%r is not an integer of at least %d; using %d" % (name, raw, minimum, default))
        return default

    def create(path):
        # A new file only: never through a symlink, never over an existing file.
        flags = _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL | getattr(_os, "O_NOFOLLOW", 0)
        return _os.fdopen(_os.open(path, flags | getattr(_os, "O_CLOEXEC", 0), 0o600), "wb")

    def stem(prefix, kind=""):
        # torch-snapshot-HOST-PID-oom: the host as the traces have it, minus path separators.
        host = host_name().replace(_os.sep, "_").replace("\0", "_") or "unknown"
        return "%s-%s-%d%s" % (prefix, host, _os.getpid(), kind)

    def create_new(base, suffix):
        # The first free name of BASE.SUFFIX, BASE.1.SUFFIX, ...: (file, name).
        d = output_dir()
        for n in range(1000):
            name = "%s%s%s" % (base, "" if n == 0 else ".%d" % n, suffix)
            try:
                return create(_os.path.join(d, name)), name
            except FileExistsError:
                continue
        raise FileExistsError("%s: 1000 names taken" % _os.path.join(d, base + suffix))

    def write_info():
        import json

        text = (json.dumps(state["info"], indent=1, sort_keys=True) + "\n").encode()
        pid, path = state.get("info_path", (None, None))
        if pid != _os.getpid():
            # Claims a name of its own (a forked child too); later writes replace that file only.
            f, name = create_new(stem("torch"), ".json")
            with f:
                f.write(text)
            state["info_path"] = (_os.getpid(), _os.path.join(output_dir(), name))
            return
        tmp = "%s.%d.tmp" % (path, state["writes"])
        state["writes"] += 1
        with create(tmp) as f:
            f.write(text)
        _os.replace(tmp, path)

    def save_info():
        guarded("writing %s" % stem("torch", ".json"), write_info)

    class _Stop(Exception):
        """The walk of the program's objects ran out of time."""

    def storages(torch):
        # What the program's own objects say its CUDA storages are: [device, address,
        # bytes, category] of the parameters and buffers of every torch.nn.Module, their
        # gradients, and the state of every torch.optim.Optimizer. A storage held in two
        # roles is named by the first of: parameters, gradients, optimizer_state. The
        # walk runs no code of the program's (types are read with type(), never
        # isinstance, which reads __class__; a tensor's own attributes are the only code
        # it calls), keeps the garbage collector off (it would run the program's __del__),
        # stops after 2 s or at Ctrl-C (the snapshot is still written), and says
        # "complete": false where it did not see everything.
        import gc
        import time
        import warnings

        module = getattr(getattr(torch, "nn", None), "Module", None)
        optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
        tensor = getattr(torch, "Tensor", None)
        rank = {"parameters": 0, "gradients": 1, "optimizer_state": 2}
        found = {}
        walk = {"complete": True, "calls": 0}
        deadline = time.monotonic() + 2.0
        kind_of = {}

        def kind(o):
            t = type(o)
            k = kind_of.get(t)
            if k is None:
                k = "module" if isinstance(module, type) and issubclass(t, module) else (
                    "optimizer" if isinstance(optimizer, type) and issubclass(t, optimizer) else "")
                kind_of[t] = k
            return k

        def add(t, category):
            walk["calls"] += 1
            if walk["calls"] % 256 == 0 and time.monotonic() > deadline:
                raise _Stop()
            try:
                if t is None or tensor is None or not issubclass(type(t), tensor):
                    return
                if not t.is_cuda:
                    return
                s = t.untyped_storage()
                key = (int(t.device.index), int(s.data_ptr()))
                if not key[1]:
                    return
                old = found.get(key)
                if old is None or rank[category] < rank[old[1]]:
                    found[key] = (int(s.nbytes()), category)
            except _Stop:
                raise
            except Exception:
                walk["complete"] = False

        def each(items, fn):
            # One item's failure loses that item only, and is said in "complete".
            try:
                items = list(items)
            except _Stop:
                raise
            except Exception:
                walk["complete"] = False
                return
            for item in items:
                try:
                    fn(item)
                except _Stop:
                    raise
                except Exception:
                    walk["complete"] = False

        def of_parameter(p):
            add(p, "parameters")
            add(getattr(p, "grad", None), "gradients")

        def of_module(m):
            each(m.parameters(recurse=False), of_parameter)
            each(m.buffers(recurse=False), lambda b: add(b, "parameters"))

        def of_state(state):
            each(state.values(), lambda v: add(v, "optimizer_state"))

        def of_optimizer(o):
            for group in o.param_groups:
                each(group.get("params", ()), of_parameter)
            each(o.state.values(), of_state)

        was_on = gc.isenabled()
        gc.disable()
        try:
            with warnings.catch_warnings():
                # Reading .grad of a tensor that is not a leaf warns: not on the
                # program's stderr.
                warnings.simplefilter("ignore")
                for n, o in enumerate(gc.get_objects() if module or optimizer else ()):
                    if n % 4096 == 0 and time.monotonic() > deadline:
                        raise _Stop()
                    try:
                        k = kind(o)
                    except Exception:
                        continue
                    if k:
                        each([o], of_module if k == "module" else of_optimizer)
        except _Stop:
            walk["complete"] = False
        except KeyboardInterrupt:
            walk["complete"] = False
        finally:
            if was_on:
                gc.enable()
        rows = [[d, a, n, c] for (d, a), (n, c) in found.items()]
        return {"version": 1, "complete": walk["complete"], "storages": rows}

    def dump(torch, kind, oom=None):
        # kind: "" at exit, "-oom[-N]" at an out-of-memory error (whose entry gets the name).
        import pickle

        snapshot = torch.cuda.memory._snapshot()
        if isinstance(snapshot, dict):
            found = guarded("naming the parameters and optimizer state", storages, torch)
            if found is not None:
                snapshot["vramtrace_tensors"] = found
        f, name = create_new(stem("torch-snapshot", kind), ".pickle")
        with f:
            # Protocol 4: what `vramtrace` and the memory_viz viewer read, on any Python.
            pickle.dump(snapshot, f, protocol=4)
        if oom is not None:
            oom["snapshot"] = name
        state["info"].setdefault("snapshots", []).append(name)
        save_info()
        return name

    # -- once torch is there ---------------------------------------------------------
    def on_oom(*args):
        # torch calls it as fn(device, size, limit, free): `size` is what the allocator
        # tried to reserve (the request rounded up to a segment), `limit` the device's
        # total, or the per-process fraction's limit when one is set.
        device, size, limit, free = (list(args) + [None] * 4)[:4]
        torch = _sys.modules.get("torch")
        if torch is None:
            return
        state["ooms"] += 1
        n = state["ooms"]
        entry = {"device": device, "allocation_bytes": size, "device_limit_bytes": limit,
                 "device_free_bytes": free, "snapshot": None}
        state["info"].setdefault("ooms", []).append(entry)
        # The observer is attached only where snapshots are possible.
        if n > state["oom_snapshots"]:
            save_info()
        else:
            kind = "-oom" if n == 1 else "-oom-%d" % n
            if guarded("writing a snapshot at out-of-memory", dump, torch, kind, entry) is None:
                save_info()  # the error is listed, without a snapshot

    def observer(*args):
        # Called from inside the allocator, maybe on an autograd thread: nothing, not even
        # KeyboardInterrupt, may leave it (it would surface as a C++ exception there).
        try:
            on_oom(*args)
        except BaseException as e:
            try:
                warn("the out-of-memory observer failed: %s: %s" % (type(e).__name__, e))
            except BaseException:
                pass

    def on_cuda_init():
        # Runs from torch.cuda's lazy initialisation (after the C++ side is up) or at once
        # when CUDA was already initialised.
        if state["active"]:
            return
        state["active"] = True
        torch = _sys.modules["torch"]
        cuda = torch.cuda
        backend = None
        get_backend = getattr(cuda, "get_allocator_backend", None)
        if get_backend is not None:
            backend = guarded("torch.cuda.get_allocator_backend()", get_backend)
            state["info"]["allocator_backend"] = backend
        refusal = None
        if str(backend).endswith("MallocAsync"):
            refusal = "PyTorch uses backend:%s, which keeps no memory history: no snapshots" % backend
        elif getattr(cuda.memory, "_dump_snapshot", None) is None:
            # torch 2.0 and older: another _record_memory_history and no snapshot dump,
            # and its observers run under the allocator's lock (a deadlock with the GIL).
            refusal = ("torch %s is older than 2.1: no memory history, no snapshots"
                       % state["info"].get("torch_version"))
        if refusal is not None:
            state["snapshots"] = False
            warn(refusal)
            save_info()
            return
        state["oom_snapshots"] = env_int("VRAMTRACE_TORCH_OOM_SNAPSHOTS", 1, 0)
        n = env_int("VRAMTRACE_TORCH_MAX_ENTRIES", 100000, 1)
        ok = guarded(
            "torch.cuda.memory._record_memory_history()",
            lambda: cuda.memory._record_memory_history(
                enabled="all", context="all", stacks="python", max_entries=n
            )
            or True,
        )
        state["info"]["memory_history"] = bool(ok)
        state["info"]["max_entries"] = n
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            warn("this torch has no out-of-memory observer: no snapshot at out-of-memory")
        else:
            guarded("attaching the out-of-memory observer", attach, observer)
        save_info()

    def at_exit():
        torch = _sys.modules.get("torch")
        if torch is None or not state["active"] or not state["snapshots"]:
            return
        if not torch.cuda.is_initialized():
            return
        guarded("writing a snapshot at exit", dump, torch, "")
        # Allocations during the rest of the shutdown would still take Python stacks.
        if not state["info"].get("memory_history"):
            return
        guarded(
            "turning memory history off",
            lambda: torch.cuda.memory._record_memory_history(enabled=None),
        )

    def torch_ready():
        torch = _sys.modules.get("torch")
        cuda = _sys.modules.get("torch.cuda") or getattr(torch, "cuda", None)
        if torch is None or cuda is None:
            return False
        info = state["info"]
        info["pid"] = _os.getpid()
        info["torch_version"] = str(getattr(torch, "__version__", "unknown"))
        version = getattr(torch, "version", None)
        info["cuda_version"] = getattr(version, "cuda", None)
        # torch 2.9 reads PYTORCH_ALLOC_CONF first; the older name still works.
        info["PYTORCH_ALLOC_CONF"] = _os.environ.get("PYTORCH_ALLOC_CONF")
        info["PYTORCH_CUDA_ALLOC_CONF"] = _os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        info["PYTORCH_NO_CUDA_MEMORY_CACHING"] = _os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")
        import atexit

        atexit.register(lambda: guarded("the exit hook", at_exit))
        save_info()
        if cuda.is_initialized():
            on_cuda_init()
        else:
            lazy = getattr(cuda, "_lazy_call", None)
            if lazy is None:
                warn("this torch has no torch.cuda._lazy_call: memory history not turned on")
            else:
                # Queued calls that raise would break torch's own initialisation: guard.
                lazy(lambda: guarded("turning on memory history", on_cuda_init))
        return True

    def loaded(name):
        if name == "torch":
            state["torch_done"] = True
        if not state["torch_done"] or finder.done:
            return
        # torch imports torch.cuda itself; if it has not yet, wait for torch.cuda.
        if "torch.cuda" in _sys.modules or name == "torch.cuda":
            finder.done = True
            guarded("the PyTorch hook", torch_ready)

    class Finder(object):
        """Waits for `torch` and `torch.cuda` to be imported by the program."""

        done = False
        busy = False

        def find_spec(self, fullname, path=None, target=None):
            if self.done or self.busy or fullname not in ("torch", "torch.cuda"):
                return None
            self.busy = True
            try:
                spec = None
                for f in list(_sys.meta_path):
                    find = getattr(f, "find_spec", None)
                    if f is self or find is None:
                        continue
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
            finally:
                self.busy = False
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            original = loader.exec_module
            own = "exec_module" in getattr(loader, "__dict__", {})

            def exec_module(module, _original=original, _name=fullname):
                # A loader may be shared (a zip importer loads every module of the
                # archive): act on this module only, and only once.
                if getattr(module, "__name__", None) != _name:
                    return _original(module)
                try:
                    if own:
                        loader.exec_module = _original
                    else:
                        del loader.exec_module
                except Exception:
                    pass
                _original(module)
                guarded("the PyTorch hook", loaded, _name)

            try:
                loader.exec_module = exec_module
            except Exception as e:
                warn("cannot watch the import of %s: %s" % (fullname, e))
            return spec

    finder = Finder()

    guarded("running your sitecustomize", chain_user_sitecustomize)
    if _os.environ.get("VRAMTRACE_TORCH", "1") == "0":
        return
    if "torch" in _sys.modules:
        state["torch_done"] = True
        finder.done = True
        guarded("the PyTorch hook", torch_ready)
    else:
        _sys.meta_path.insert(0, finder)


try:
    _vramtrace_torch_hook()
except Exception as _e:  # pragma: no cover - the last guard
    try:
        _sys.stderr.write("vramtrace: warning: the PyTorch hook failed: %s\n" % (_e,))
    except Exception:
        pass
