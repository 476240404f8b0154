# vramtrace's startup hook for PyTorch programs.
#
# `vramtrace run` writes this file into a private directory that it puts first on
# PYTHONPATH, so every Python process of the run imports it at startup (as `sitecustomize`).
# It then:
#   - runs the user's own `sitecustomize`, if there is one further along sys.path;
#   - waits for the program to import `torch` (it never imports torch itself), and then
#       * once CUDA is initialised, turns on the caching allocator's memory history
#         (python stacks, VRAMTRACE_TORCH_MAX_ENTRIES entries, default 100000) and attaches
#         an out-of-memory observer that dumps a snapshot before the exception propagates;
#       * dumps a snapshot at exit;
#       * records the torch version and allocator settings in torch-<pid>.json.
#   Files go beside the trace: the directory of VRAMTRACE_OUTPUT.
# Nothing here may break the program: every failure is one line on stderr,
# `vramtrace: warning: ...`, and the program goes on. VRAMTRACE_TORCH=0 turns it off.

import os as _os
import sys as _sys


def _vramtrace_torch_hook():
    state = {"warned": set(), "torch_done": False, "active": False, "ooms": 0, "info": {}}
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
    def output_dir():
        pattern = _os.environ.get("VRAMTRACE_OUTPUT", "")
        if not pattern:
            return _os.getcwd()
        d = pattern if pattern.endswith("/") else _os.path.dirname(pattern)
        if not d:
            return _os.getcwd()
        host = ""
        try:
            host = _os.uname()[1]
        except Exception:
            pass
        d = (
            d.replace("%%", "\0")
            .replace("%p", str(_os.getpid()))
            .replace("%h", host)
            .replace("%r", _os.environ.get("RANK", "0"))
            .replace("\0", "%")
        )
        return d

    def max_entries():
        raw = _os.environ.get("VRAMTRACE_TORCH_MAX_ENTRIES", "")
        if raw == "":
            return 100000
        try:
            n = int(raw)
            if n > 0:
                return n
        except ValueError:
            pass
        warn("VRAMTRACE_TORCH_MAX_ENTRIES=%r is not a positive integer; using 100000" % raw)
        return 100000

    def write_info():
        import json

        path = _os.path.join(output_dir(), "torch-%d.json" % _os.getpid())
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state["info"], f, indent=1, sort_keys=True)
            f.write("\n")
        _os.replace(tmp, path)

    def dump(torch, name):
        path = _os.path.join(output_dir(), name)
        torch.cuda.memory._dump_snapshot(path)
        state["info"].setdefault("snapshots", []).append(name)
        guarded("writing torch-%d.json" % _os.getpid(), write_info)
        return path

    # -- once torch is there ---------------------------------------------------------
    def on_oom(*args):
        # torch calls it as fn(device, alloc, device_total, device_free).
        device, alloc, device_total, device_free = (list(args) + [None] * 4)[:4]
        torch = _sys.modules.get("torch")
        if torch is None:
            return
        state["ooms"] += 1
        n = state["ooms"]
        name = "torch-snapshot-%d-oom%s.pickle" % (_os.getpid(), "" if n == 1 else "-%d" % n)
        state["info"].setdefault("ooms", []).append(
            {"device": device, "requested_bytes": alloc, "device_total_bytes": device_total,
             "device_free_bytes": device_free, "snapshot": name}
        )
        guarded("dumping a snapshot at out-of-memory", dump, torch, name)

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
        if backend == "cudaMallocAsync":
            warn("PyTorch uses backend:cudaMallocAsync, which keeps no memory history: no snapshots")
            guarded("writing torch-%d.json" % _os.getpid(), write_info)
            return
        n = max_entries()
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
            guarded(
                "attaching the out-of-memory observer",
                attach,
                lambda *a: guarded("the out-of-memory observer", on_oom, *a),
            )
        guarded("writing torch-%d.json" % _os.getpid(), write_info)

    def at_exit():
        torch = _sys.modules.get("torch")
        if torch is None or not state["active"]:
            return
        if not torch.cuda.is_initialized():
            return
        guarded(
            "dumping a snapshot at exit",
            dump,
            torch,
            "torch-snapshot-%d.pickle" % _os.getpid(),
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
        info["PYTORCH_CUDA_ALLOC_CONF"] = _os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        info["PYTORCH_NO_CUDA_MEMORY_CACHING"] = _os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")
        import atexit

        atexit.register(lambda: guarded("the exit hook", at_exit))
        guarded("writing torch-%d.json" % _os.getpid(), write_info)
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
            original = spec.loader.exec_module

            def exec_module(module, _original=original, _name=fullname):
                _original(module)
                guarded("the PyTorch hook", loaded, _name)

            try:
                spec.loader.exec_module = exec_module
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
