"""A small PyTorch training loop for the real-GPU check: prints, as JSON on its last line,
PyTorch's own figures (and nvidia-smi's for this process) to compare with vramtrace's."""
import ctypes
import json
import os
import subprocess

import torch

# Load NVML as monitoring code in a training job does, so that vramtrace samples it.
try:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlInit_v2()
except OSError:
    nvml = None

torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(4096, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 4096)
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
caught = 0
for step in range(20):
    batch = 256 * (1 + step % 4)
    x = torch.randn(batch, 4096, device=device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step == 10:
        # One out-of-memory error, caught as a batch-size finder would.
        try:
            torch.empty(1 << 45, dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError:
            caught += 1
torch.cuda.synchronize()


def nvidia_smi_used():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        ).stdout
    except Exception:
        return None
    for line in out.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return int(used.strip()) * 1024 * 1024
    return None  # in a container nvidia-smi shows host pids


def storage_bytes(tensors):
    # Each CUDA storage once: what the hook's record of the exit snapshot must give.
    seen = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_cuda:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


parameters = list(model.parameters()) + list(model.buffers())
categories = {
    "parameters": storage_bytes(parameters),
    "gradients": storage_bytes(p.grad for p in model.parameters() if p.grad is not None),
    "optimizer_state": storage_bytes(v for s in optimizer.state.values() for v in s.values()),
}

print(json.dumps({
    "torch": torch.__version__,
    "backend": torch.cuda.get_allocator_backend(),
    "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "memory_reserved_at_end": torch.cuda.memory_reserved(),
    "nvidia_smi_used_bytes": nvidia_smi_used(),
    "caught_ooms": caught,
    "categories": categories,
    "pid": os.getpid(),
}))
