//! The PyTorch hook names a snapshot's parameters, buffers, gradients and optimizer
//! state from the program's own objects: against a stand-in `torch` whose modules,
//! optimizer and tensors the test chose, so each category's bytes are known exactly.
//! Gradients are allocated as the autograd engine's thread allocates them, with no Python
//! frame (the hook records `stacks="python"`): only the hook's record names them.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use vramtrace_analyzer::cmd::python_hook;

/// A stand-in `torch`: each CUDA tensor has a storage of its own, 64 MiB apart; the
/// snapshot holds each as a segment with one block, allocated in creation order by its
/// Python frames.
const STANDIN: &[(&str, &str)] = &[
    (
        "torch/__init__.py",
        r#"
import sys
__version__ = '9.9.9-standin'
class version:
    cuda = '12.4'
M = 1 << 20
_live = []
_next = [1 << 32]
class _Storage:
    def __init__(self, addr, n):
        self._addr, self._n = addr, n
    def data_ptr(self):
        return self._addr
    def nbytes(self):
        return self._n
class device:
    type = 'cuda'
    def __init__(self, index):
        self.index = index
def _frames():
    f, out = sys._getframe(2), []
    while f is not None:
        out.append({'filename': f.f_code.co_filename, 'line': f.f_lineno, 'name': f.f_code.co_name})
        f = f.f_back
    return out
class Tensor:
    def __init__(self, nbytes, frames=None):
        self._storage = _Storage(_next[0], nbytes)
        _next[0] += 64 * M
        self.is_cuda = True
        self.device = device(0)
        self.grad = None
        _live.append((self._storage._addr, nbytes, _frames() if frames is None else frames))
    def untyped_storage(self):
        return self._storage
def empty(nbytes):
    return Tensor(nbytes)
from . import _C, cuda, nn, optim
"#,
    ),
    (
        "torch/_C.py",
        "observers = []\ndef _cuda_attach_out_of_memory_observer(fn):\n    observers.append(fn)\n",
    ),
    (
        "torch/nn/__init__.py",
        r#"
import torch
class Module:
    def __init__(self):
        self._params, self._buffers = [], []
    def parameters(self, recurse=True):
        return iter(self._params)
    def buffers(self, recurse=True):
        return iter(self._buffers)
class Parameter(torch.Tensor):
    pass
"#,
    ),
    (
        "torch/optim/__init__.py",
        r#"
import torch
class Optimizer:
    def __init__(self, params):
        self.param_groups = [{'params': list(params)}]
        self.state = {}
class Adam(Optimizer):
    def step(self):
        for p in self.param_groups[0]['params']:
            n = p.untyped_storage().nbytes()
            self.state[p] = {'step': 1, 'exp_avg': torch.empty(n), 'exp_avg_sq': torch.empty(n)}
"#,
    ),
    (
        "torch/cuda/__init__.py",
        r#"
from . import memory
_initialized = False
_queued = []
def is_initialized():
    return _initialized
def _lazy_call(fn):
    if _initialized:
        fn()
    else:
        _queued.append(fn)
def init():
    global _initialized
    for fn in _queued:
        fn()
    _initialized = True
def get_allocator_backend():
    return 'native'
"#,
    ),
    (
        "torch/cuda/memory.py",
        r#"
import torch
def _record_memory_history(enabled='all', context='all', stacks='all', max_entries=0):
    pass
def _dump_snapshot(path):
    pass
def _snapshot(device=None):
    segments, trace = [], []
    for t, (addr, n, frames) in enumerate(torch._live):
        block = {'address': addr, 'size': n, 'requested_size': n, 'state': 'active_allocated', 'frames': frames}
        segments.append({'device': 0, 'address': addr, 'total_size': n, 'allocated_size': n,
                         'active_size': n, 'requested_size': n, 'stream': 0,
                         'segment_type': 'large', 'blocks': [block]})
        trace.append({'action': 'segment_alloc', 'addr': addr, 'size': n, 'stream': 0,
                      'time_us': 2 * t + 1, 'frames': frames})
        trace.append({'action': 'alloc', 'addr': addr, 'size': n, 'stream': 0,
                      'time_us': 2 * t + 2, 'frames': frames})
    return {'segments': segments, 'device_traces': [trace]}
"#,
    ),
];

/// A training step: a module of two parameters and a buffer, Adam over them, the
/// forward's activation, gradients with no Python frame, then `step`, and a batch the
/// program made itself. An object whose `__class__` raises, and an optimizer made before
/// the module that holds its buffer in its state (the buffer is still a parameter).
const TRAIN: &str = r#"
import torch
M = 1 << 20
torch.cuda.init()
class Sly:
    @property
    def __class__(self):
        raise RuntimeError("the hook read my __class__")
sly = Sly()
buffer = torch.empty(2 * M)
early = torch.optim.Optimizer([])
early.state["kept"] = {"buffer": buffer}
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Parameter(4 * M), torch.nn.Parameter(2 * M)
        self._params = [self.a, self.b]
        self._buffers = [buffer]
    def forward(self):
        return torch.empty(6 * M)
net = Net()
opt = torch.optim.Adam(net.parameters())
activation = net.forward()
for p in net.parameters():
    p.grad = torch.Tensor(p.untyped_storage().nbytes(), frames=[])
opt.step()
batch = torch.empty(2 * M)
"#;

fn write_tree(root: &Path) {
    for (path, text) in STANDIN {
        let p = root.join("standin").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::write(root.join("train.py"), TRAIN).unwrap();
    std::fs::create_dir_all(root.join("traces")).unwrap();
}

#[test]
fn the_hook_names_parameters_gradients_and_optimizer_state_by_their_storages() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write_tree(root);
    let hook = python_hook::write_hook().unwrap();
    let out = Command::new("python3")
        .arg(root.join("train.py"))
        .current_dir(root)
        .env(
            "PYTHONPATH",
            format!("{}:{}", hook.dir.display(), root.join("standin").display()),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(
            "VRAMTRACE_OUTPUT",
            format!("{}/vramtrace-%h-%p.jsonl", root.join("traces").display()),
        )
        .env_remove("VRAMTRACE_TORCH")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("warning"),
        "{stderr}"
    );
    let snapshot = std::fs::read_dir(root.join("traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pickle"))
        .expect("the exit snapshot");
    let file = snapshot.to_str().unwrap();

    let m = 1u64 << 20;
    let want: BTreeMap<String, (u64, u64)> = [
        ("parameters", (8 * m, 3)),
        ("gradients", (6 * m, 2)),
        ("optimizer_state", (12 * m, 4)),
        ("activations", (6 * m, 1)),
        ("other", (2 * m, 1)),
        ("unknown", (0, 0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let (summary, _, stderr) = common::json_view(&["summary", "--json", file]);
    let device = &summary["processes"][0]["devices"][0];
    let end = &device["tensor_categories_at_end"];
    assert_eq!(end["known_by"], "recorded", "{stderr}");
    assert_eq!(common::categories(end), want);
    // At the peak only the frames tell: the gradients have none.
    let peak = common::categories(&device["tensor_categories_at_peak"]);
    assert_eq!(peak["unknown"], (6 * m, 2), "{peak:?}");
    let text = String::from_utf8(common::vramtrace_ok(&["summary", file]).stdout).unwrap();
    assert!(
        text.contains("when the snapshot was taken were (recorded from the program's modules and optimizers, the rest inferred from frames): optimizer state 12.0 MiB, parameters 8.0 MiB, gradients 6.0 MiB, activations 6.0 MiB, other tensors 2.0 MiB"),
        "{text}"
    );
}

/// A storage the hook recorded at a block's address with other bytes than the block's was
/// freed, and its address given to another tensor, between the snapshot and the walk:
/// the block keeps the category its frames give.
const STALE: &str = r#"
user = [{"filename": "/home/me/train.py", "line": 3, "name": "main"}]
segments, trace = one_segment_each([(2 * M, user), (4 * M, user)])
rows = [[0, 1 << 32, 2 * M, "parameters"], [0, (1 << 32) + 64 * M, 8 * M, "gradients"]]
snapshot = {"segments": segments, "device_traces": [trace],
            "vramtrace_tensors": {"version": 1, "complete": True, "storages": rows}}
pickle.dump(snapshot, open(sys.argv[1], "wb"))
"#;

#[test]
fn a_recorded_storage_of_other_bytes_than_its_block_is_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.pickle");
    common::write_snapshot(STALE, &path);
    let (summary, _, _) = common::json_view(&["summary", "--json", path.to_str().unwrap()]);
    let end = &summary["processes"][0]["devices"][0]["tensor_categories_at_end"];
    let c = common::categories(end);
    let m = 1u64 << 20;
    assert_eq!(c["parameters"], (2 * m, 1));
    assert_eq!(c["other"], (4 * m, 1));
    assert_eq!(c["gradients"], (0, 0));
}
