#!/usr/bin/env bash
# Large PyTorch snapshots: each view that reads one, beside Python's own pickle.load of
# the same file, in the same run. Prints a markdown section for docs/benchmarks.md
# (scripts/bench.sh includes it); missed targets go to stderr and, one a line, to
# $BENCH_MISSED_FILE when set. Never asserted by tests.
#
#   scripts/bench-snapshot.sh                          # release build in $CARGO_TARGET_DIR
#   BENCH_SNAPSHOT_MB=500 scripts/bench-snapshot.sh    # the size of the generated snapshot
#   BENCH_SNAPSHOT_RUNS=5 scripts/bench-snapshot.sh    # alternations, the best kept (3)
#
# The snapshot is generated here from a real one (scripts/big-snapshot.py: its history
# repeated, frames shared as PyTorch's pickler shares them) and deleted afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REL=${CARGO_TARGET_DIR:-$ROOT/target}/release
MB=${BENCH_SNAPSHOT_MB:-120}
SOURCE=${BENCH_SNAPSHOT_SOURCE:-$ROOT/../shared/fixtures/torch-snapshots/EoR_NN_snapshot.pickle}
MISSED_FILE=${BENCH_MISSED_FILE:-/dev/null}

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
miss() { echo "$1" >> "$MISSED_FILE"; say "TARGET MISSED: $1"; }
[ -x /usr/bin/time ] || { say "/usr/bin/time is missing (apt-get install time)"; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
BIG=$WORK/big.pickle
say "snapshots: generating about $MB MB from $(basename "$SOURCE")"
ENTRIES=$(python3 scripts/big-snapshot.py "$SOURCE" "$BIG" "$MB")
SIZE=$(stat -c %s "$BIG")
cat "$BIG" > /dev/null # a warm page cache for both readers

RUNS=${BENCH_SNAPSHOT_RUNS:-3}


VIEWS=(summary peak oom timeline report "export --format memory-viz" "export --format csv")
ROWS=()
for v in "${VIEWS[@]}"; do
    # shellcheck disable=SC2206 # the view's words
    args=($v)
    case $v in
        report) args+=(-o "$WORK/out.html") ;;
        export*) args+=(-o "$WORK/out") ;;
    esac
    say "snapshots: pickle.load, then vramtrace $v, $RUNS times"
    py=(python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$BIG")
    vt=("$REL/vramtrace" "${args[@]}" "$BIG")
    read -r py_s py_kib vt_s vt_kib < <(alternated_best py vt)
    speed=$(ratio "$py_s" "$vt_s")
    memory=$(ratio "$((vt_kib * 1024))" "$SIZE")
    ROWS+=("| \`$v\` | $vt_s s | $((vt_kib / 1024)) MiB | ${memory}x | $py_s s | $((py_kib / 1024)) MiB | ${speed}x |")
    le 5 "$speed" || miss "snapshot: vramtrace $v took $vt_s s, pickle.load $py_s s: ${speed}x faster (target >= 5x)"
    le "$memory" 2 || miss "snapshot: vramtrace $v peaked at ${memory}x the file's size (target <= 2x)"
done

echo "## 6. Large PyTorch snapshots"
echo
echo "A $((SIZE / 1048576)) MiB snapshot ($ENTRIES history entries) written by \`scripts/big-snapshot.py\` from the real \`$(basename "$SOURCE")\` (its history repeated, frame lists shared as PyTorch's pickler shares them), from a warm page cache. Each view is run right after Python's own \`pickle.load\` of the same file (\`python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], \"rb\"))'\`, $(python3 --version 2>&1)), the two alternated $RUNS times, the least wall time of each kept; wall time and peak RSS from \`/usr/bin/time\`. Exports and the report write to a file (the last run's removed and the page cache written back before each run, outside the timing). $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
echo "| view | vramtrace | peak RSS | RSS / file | pickle.load | its peak RSS | pickle.load / vramtrace |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for r in "${ROWS[@]}"; do echo "$r"; done
echo
echo "Targets: at least 5x faster than \`pickle.load\` of the same file, in at most 2x the file's size."
