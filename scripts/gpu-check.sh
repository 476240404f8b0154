#!/usr/bin/env bash
# The real-GPU check, in one short run on a machine with an NVIDIA GPU, CUDA, PyTorch and
# nvcc. Build here first (`cargo build --release`) and bring target/release along.
# Prints, side by side, what the programs say of themselves and what vramtrace recorded.
set -uo pipefail
cd "$(dirname "$0")/.."
VT=target/release/vramtrace
OUT=${OUT:-/tmp/vramtrace-gpu-check}
rm -rf "$OUT" && mkdir -p "$OUT"
PY=${PYTHON:-python3}

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || exit 1
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || exit 1

peak() { # peak reserved bytes on device 0 of the process that printed pid $2, in trace dir $1
  $VT summary --json "$1" | $PY -c '
import json, sys
s = json.load(sys.stdin)
for p in s["processes"]:
    if p["pid"] == int(sys.argv[1]):
        d = [d for d in p["devices"] if d["device"] == 0]
        print(json.dumps({"vramtrace_peak_reserved": d[0]["peak_reserved_bytes"] if d else 0,
                          "vramtrace_peak_allocated": d[0].get("peak_allocated_bytes") if d else None,
                          "vramtrace_peak_device": d[0].get("peak_device_bytes") if d else None,
                          "events": p["events"], "failed": p["failed_allocations"]}))' "$2"
}

echo "== nvcc, static runtime"
if command -v nvcc >/dev/null; then
  nvcc -o "$OUT/alloc" scripts/gpu-check/alloc.cu && \
  $VT run -o "$OUT/alloc-traces" -- "$OUT/alloc" && $VT summary "$OUT/alloc-traces"
else
  echo "nvcc not found: skipped"
fi

for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
  echo "== PyTorch training loop, PYTORCH_CUDA_ALLOC_CONF='$conf'"
  dir="$OUT/torch-${conf//[:]/-}"
  PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 300 $VT run -o "$dir" -- $PY scripts/gpu-check/train.py > "$dir.out" 2> "$dir.err"
  status=$?
  tail -n 1 "$dir.out"
  [ $status -eq 0 ] || { echo "exit $status"; tail -n 20 "$dir.err"; continue; }
  pid=$(tail -n 1 "$dir.out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
  peak "$dir" "$pid"
done
echo "== done"
