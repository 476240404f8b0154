#!/usr/bin/env bash
# The real-GPU check, in one short run (a few minutes) on a machine with an NVIDIA GPU,
# CUDA, PyTorch and nvcc, but maybe no Rust: build here (`cargo build --release`) and bring
# target/release/vramtrace and target/release/libvramtrace.so along (nothing else is used).
#
# Prints, side by side, what the programs say of themselves and what vramtrace recorded:
#   - a CUDA C++ program built by nvcc (static runtime, driver reached by cuGetProcAddress);
#   - a small PyTorch training loop with one caught out-of-memory error, under the default
#     allocator, expandable_segments:True and backend:cudaMallocAsync: vramtrace's reserved
#     peak beside torch.cuda.max_memory_reserved(), the snapshot's allocated peak beside
#     max_memory_allocated(), its NVML device figure beside nvidia-smi's, and what the
#     startup hook wrote (warnings, files, the snapshot read back), and the exit snapshot's
#     parameters, gradients and optimizer state beside the program's own count of them;
#   - whatif: the default, max_split_size_mb:128 and expandable_segments:True runs'
#     snapshots replayed under their own settings (each must match: for expandable
#     segments the only check against PyTorch itself), and the default run replayed under
#     each of the other two beside that run's own figures.
#
# Work files go to $GPU_CHECK_DIR (default: $OUT/gpu-check when $OUT is set, else
# /tmp/vramtrace-gpu-check); only that folder is emptied first. GPU_CHECK_TRAIN names
# another training script and GPU_CHECK_RUN_ARGS adds `vramtrace run` options: a dry run of
# this script's plumbing without a GPU uses a fake script on the simulated stack (--sim).
set -uo pipefail
cd "$(dirname "$0")/.."
VT=${VT:-target/release/vramtrace}
PY=${PYTHON:-python3}
TRAIN=${GPU_CHECK_TRAIN:-scripts/gpu-check/train.py}
WORK=${GPU_CHECK_DIR:-${OUT:+$OUT/gpu-check}}
WORK=${WORK:-/tmp/vramtrace-gpu-check}
rm -rf "$WORK" && mkdir -p "$WORK"
[ -x "$VT" ] || { echo "no $VT: build with cargo build --release first"; exit 1; }
[ -f "$(dirname "$VT")/libvramtrace.so" ] || { echo "no libvramtrace.so beside $VT"; exit 1; }

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || exit 1
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available())' || exit 1
$VT --version

# vramtrace's figures for the process that printed pid $2, in trace dir $1, beside its own.
compare() {
  local dir=$1 pid=$2 own=$3
  $VT summary --json "$dir" > "$dir.summary.json" || { echo "summary failed"; return; }
  $VT timeline --json "$dir" > "$dir.timeline.json" 2> "$dir.timeline.err" || true
  $PY - "$dir.summary.json" "$dir.timeline.json" "$pid" "$own" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
try:
    timeline = json.load(open(sys.argv[2]))
except Exception as e:
    timeline = {"series": []}
pid, own = int(sys.argv[3]), json.loads(sys.argv[4])
proc = [p for p in summary["processes"] if p["pid"] == pid]
if not proc:
    print("no trace of pid", pid, "among", [p["pid"] for p in summary["processes"]])
    sys.exit()
p = proc[0]
d = ([d for d in p["devices"] if d["device"] == 0] or [{}])[0]
def series_max(layer):
    best = None
    for s in timeline["series"]:
        if s["scope"] == "process" and s["pid"] == pid and s["layer"] == layer:
            m = max((pt["max_bytes"] for pt in s["points"]), default=None)
            best = m if best is None else max(best, m or 0)
    return best
def row(what, theirs, ours):
    diff = "" if theirs is None or ours is None else "%+d" % (ours - theirs)
    print("  %-34s %16s %16s %14s" % (what, theirs, ours, diff))
print("  %-34s %16s %16s %14s" % ("", "program says", "vramtrace", "difference"))
row("peak reserved (max_memory_reserved)", own["max_memory_reserved"], d.get("peak_reserved_bytes"))
row("peak allocated (max_memory_allocated)", own["max_memory_allocated"], series_max("allocated"))
row("device, this process (nvidia-smi)", own.get("nvidia_smi_used_bytes"), series_max("device"))
row("reserved at end (memory_reserved)", own["memory_reserved_at_end"], d.get("reserved_bytes_at_end"))
print("  events %d, failed allocations %d (the program caught %d)" % (
    p["events"], p["failed_allocations"], own["caught_ooms"]))
EOF
}

echo "== nvcc, static runtime"
if command -v nvcc >/dev/null; then
  nvcc -o "$WORK/alloc" scripts/gpu-check/alloc.cu && \
  $VT run -o "$WORK/alloc-traces" -- "$WORK/alloc" && $VT summary "$WORK/alloc-traces"
else
  echo "nvcc not found: skipped"
fi

for conf in "" "expandable_segments:True" "backend:cudaMallocAsync" "max_split_size_mb:128"; do
  echo "== PyTorch training loop, PYTORCH_CUDA_ALLOC_CONF='$conf'"
  name=${conf:-default}
  dir="$WORK/torch-${name//[:]/-}"
  env -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF="$conf" \
    timeout 300 $VT run ${GPU_CHECK_RUN_ARGS:-} -o "$dir" -- $PY "$TRAIN" > "$dir.out" 2> "$dir.err"
  status=$?
  own=$(tail -n 1 "$dir.out")
  echo "  torch says: $own"
  echo "  vramtrace warnings: $(grep -c 'vramtrace: warning' "$dir.err")"
  grep 'vramtrace: warning' "$dir.err" | head -n 5 | sed 's/^/    /'
  [ $status -eq 0 ] || { echo "  exit $status"; tail -n 20 "$dir.err"; continue; }
  pid=$(echo "$own" | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
  echo "  files: $(ls "$dir" | tr '\n' ' ')"
  compare "$dir" "$pid" "$own"
  for snap in "$dir"/torch-snapshot-*.pickle; do
    [ -e "$snap" ] || continue
    echo "  -- $(basename "$snap")"
    $VT snapshot "$snap" 2>&1 | head -n 12 | sed 's/^/    /'
  done
  # What the tensors were for at exit, by the hook's record, beside the program's own count.
  for snap in "$dir"/torch-snapshot-*-"$pid".pickle; do
    [ -e "$snap" ] || continue
    $VT summary --json "$snap" > "$snap.summary.json" || continue
    $PY - "$snap.summary.json" "$own" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["processes"][0]["devices"][0]
own = json.loads(sys.argv[2]).get("categories", {})
c = d.get("tensor_categories_at_end") or {}
got = {s["category"]: s["bytes"] for s in c.get("split", [])}
print("  categories at exit (%s)" % c.get("known_by"))
for k in ["parameters", "gradients", "optimizer_state"]:
    print("  %-34s %16s %16s" % (k, own.get(k), got.get(k)))
EOF
  done
  for info in "$dir"/torch-*-"$pid".json; do
    [ -e "$info" ] && sed 's/^/    /' "$info" | head -n 30
  done
  $VT oom "$dir" 2>&1 | head -n 12 | sed 's/^/    /'
done
echo "== whatif: each run replayed as recorded, and the other runs predicted from the default one"
def="$WORK/torch-default"
$VT whatif --no-search "$def" 2>&1 | sed 's/^/    /'
for conf in "max_split_size_mb:128" "expandable_segments:True"; do
  alt="$WORK/torch-${conf//[:]/-}"
  echo "  -- $conf: its own run replayed (must match), then predicted from the default run"
  $VT whatif --no-search "$alt" 2>&1 | tail -n 2 | sed 's/^/    /'
  $VT whatif --json --no-search --set "$conf" "$def" > "$WORK/whatif.json" || continue
  $PY - "$WORK/whatif.json" "$alt.out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
s = d["scenarios"][0]
own = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
print("  %-44s %16s %16s" % ("", "predicted", "the run says"))
print("  %-44s %16s %16s" % ("peak reserved (max_memory_reserved)", s["peak_reserved_bytes"], own["max_memory_reserved"]))
print("  %-44s %16s %16s" % ("peak allocated (max_memory_allocated)", s["peak_allocated_bytes"], own["max_memory_allocated"]))
print("  (replayed on %s bytes, the card less what the traces show outside the allocator: %s;"
      % (d["card_bytes"], d["device_layer"]))
print("   the run's caught out-of-memory error: %d failures, %d served)" % (len(s["failures"]), s["recorded_failures_served"]))
EOF
done
du -sh "$WORK"
echo "== done"
