"""A small PyTorch training loop for the real-GPU check: prints, as JSON on its last line,
PyTorch's own figures to compare with vramtrace's."""
import json
import os

import torch

torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Linear(4096, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 4096)
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
for step in range(20):
    batch = 256 * (1 + step % 4)
    x = torch.randn(batch, 4096, device=device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
torch.cuda.synchronize()
print(json.dumps({
    "torch": torch.__version__,
    "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "memory_reserved_at_end": torch.cuda.memory_reserved(),
    "pid": os.getpid(),
}))
