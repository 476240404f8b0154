#!/usr/bin/env bash
# Many ranks: a run directory of a simulated pipeline-parallel job (RANKS traces with
# stacks, 8 GPUs to a node), summarised and reported, beside the same views of one trace
# holding as many events, in the same run. Prints a markdown section for
# docs/benchmarks.md (scripts/bench.sh includes it); missed targets go to stderr and, one
# a line, to $BENCH_MISSED_FILE when set. Never asserted by tests.
#
#   scripts/bench-ranks.sh                       # 1,024 ranks, release build in $CARGO_TARGET_DIR
#   BENCH_RANKS=64 BENCH_RANK_STEPS=5 scripts/bench-ranks.sh
#   BENCH_RANK_RUNS=5 scripts/bench-ranks.sh     # alternations, the best kept (3)
#
# Each rank is the `pipeline` workload (tests/workloads/pipeline.c), started as torchrun
# starts it (RANK, LOCAL_RANK, WORLD_SIZE, CUDA_VISIBLE_DEVICES), under `vramtrace run
# --sim`. Where `unshare -u` works, each node of 8 ranks has its own host name, as on a
# cluster; otherwise all ranks share this host. The traces are deleted afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
RANKS=${BENCH_RANKS:-1024}
STEPS=${BENCH_RANK_STEPS:-20}
RUNS=${BENCH_RANK_RUNS:-3}
MISSED_FILE=${BENCH_MISSED_FILE:-/dev/null}

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
miss() { echo "$1" >> "$MISSED_FILE"; say "TARGET MISSED: $1"; }
[ -x /usr/bin/time ] || { say "/usr/bin/time is missing (apt-get install time)"; exit 1; }
VT=$REL/vramtrace
PIPELINE=$REL/sim/pipeline
[ -x "$VT" ] && [ -x "$PIPELINE" ] || { say "build first: cargo build --release --workspace"; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
NODES=$(((RANKS + 7) / 8))

# One node's ranks, started together; its host name set where the kernel lets us.
cat > "$WORK/node.sh" <<'EOF'
node=$1 ranks=$2 world=$3 steps=$4 program=$5 hosts=$6
[ "$hosts" = yes ] && hostname "node$node"
for l in 0 1 2 3 4 5 6 7; do
    r=$((node * 8 + l))
    [ "$r" -lt "$ranks" ] || break
    RANK=$r LOCAL_RANK=$l WORLD_SIZE=$world CUDA_VISIBLE_DEVICES=$l "$program" "$steps" > /dev/null &
done
wait
EOF
HOSTS=no
unshare -u true 2> /dev/null && HOSTS=yes
if [ "$HOSTS" = yes ]; then NODE=(unshare -u sh "$WORK/node.sh"); else NODE=(sh "$WORK/node.sh"); fi
export RANKS STEPS PIPELINE HOSTS WORK
say "ranks: recording $RANKS ranks of pipeline $STEPS on $NODES nodes (own host names: $HOSTS)"
started=$(date +%s)
# shellcheck disable=SC2016 # expanded by the inner shell
"$VT" run --sim --sim-devices 8 -o "$WORK/run" -- sh -c \
    'seq 0 $(('"$NODES"' - 1)) | xargs -P "$(nproc)" -I{} '"${NODE[*]}"' {} "$RANKS" "$RANKS" "$STEPS" "$PIPELINE" "$HOSTS"' \
    > /dev/null 2> "$WORK/run.err" || { say "recording failed:"; tail -3 "$WORK/run.err" >&2; exit 1; }
RECORD_S=$(($(date +%s) - started))
TRACES=$(find "$WORK/run" -name '*.jsonl' | wc -l)
RUN_BYTES=$(du -sb "$WORK/run" | cut -f1)
[ "$TRACES" -eq "$RANKS" ] || say "expected $RANKS traces, found $TRACES"

# The summary's own count of the run's events (every process's trace records).
events_of() { "$VT" summary --json "$1" | python3 -c 'import json, sys; print(sum(p["events"] for p in json.load(sys.stdin)["processes"]))'; }
EVENTS=$(events_of "$WORK/run")

# One trace of as many events: one rank running every rank's steps.
say "ranks: recording one trace of about $EVENTS events"
ONE_STEPS=$((STEPS * RANKS))
RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 "$VT" run --sim -o "$WORK/one" -- "$PIPELINE" "$ONE_STEPS" > /dev/null 2> "$WORK/one.err" ||
    { say "recording one trace failed:"; tail -3 "$WORK/one.err" >&2; exit 1; }
ONE_EVENTS=$(events_of "$WORK/one")
ONE_BYTES=$(du -sb "$WORK/one" | cut -f1)
cat "$WORK"/run/* "$WORK"/one/* > /dev/null # a warm page cache for both


VIEWS=(summary "summary --json" report)
ROWS=()
for v in "${VIEWS[@]}"; do
    # shellcheck disable=SC2206 # the view's words
    args=($v)
    [ "$v" = report ] && args+=(-o "$WORK/out.html")
    say "ranks: vramtrace $v of $RANKS traces, then of one, $RUNS times"
    many=("$VT" "${args[@]}" "$WORK/run")
    one=("$VT" "${args[@]}" "$WORK/one")
    read -r many_s many_kib one_s one_kib < <(alternated_best many one)
    many_rate=$(rate "$EVENTS" "$many_s")
    one_rate=$(rate "$ONE_EVENTS" "$one_s")
    ROWS+=("| \`$v\` | $many_s s | $many_rate | $((many_kib / 1024)) MiB | $one_s s | $one_rate | $((one_kib / 1024)) MiB | $(ratio "$many_rate" "$one_rate") |")
    le "$many_s" 60 || miss "ranks: vramtrace $v of $RANKS ranks took $many_s s (target < 60 s)"
done

echo "## 7. Many ranks"
echo
echo "A run directory of $TRACES traces ($((RUN_BYTES / 1048576)) MiB, $EVENTS events with stacks) recorded in $RECORD_S s by \`vramtrace run --sim\`: $RANKS ranks of the \`pipeline\` workload ($STEPS steps each), 8 to a node, on $NODES nodes$([ "$HOSTS" = yes ] && echo " with host names of their own" || echo " sharing one host name"). Beside it, one trace of $ONE_EVENTS events ($((ONE_BYTES / 1048576)) MiB: one rank running $ONE_STEPS steps). Each view of the directory is run right after the same view of the one trace, the two alternated $RUNS times, the least wall time of each kept, from a warm page cache; wall time and peak RSS from \`/usr/bin/time\`. $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
echo "| view | $RANKS ranks | events/s | peak RSS | one trace | events/s | peak RSS | events/s, ranks / one trace |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for r in "${ROWS[@]}"; do echo "$r"; done
echo
echo "Target: $RANKS ranks summarised, and reported, in under 60 s on 2 cores, in memory bounded whatever the number of ranks."
