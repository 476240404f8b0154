#!/usr/bin/env bash
# Large PyTorch snapshots: each view that reads one, beside Python's own pickle.load of
# the same file, in the same run. Prints a markdown section for docs/benchmarks.md
# (scripts/bench.sh includes it); missed targets go to stderr and, one a line, to
# $BENCH_MISSED_FILE when set. Never asserted by tests.
#
#   scripts/bench-snapshot.sh                          # release build in $CARGO_TARGET_DIR
#   BENCH_SNAPSHOT_MB=500 scripts/bench-snapshot.sh    # the size of the generated snapshot
#   BENCH_SNAPSHOT_RUNS=5 scripts/bench-snapshot.sh    # alternations, the best kept (3)
#   BENCH_SNAPSHOT_SEGMENTS_MB=80, BENCH_SNAPSHOT_DIR_FILES=150: the other two shapes
#
# Three shapes, generated here from real snapshots and deleted afterwards: a history-heavy
# file (scripts/big-snapshot.py: the history repeated, frames shared as PyTorch's pickler
# shares them), a segment-heavy one (`--segments`: each copy at addresses of its own, its
# final segments kept), and a directory of many one-MB snapshots.
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
RUNS=${BENCH_SNAPSHOT_RUNS:-3}
SEGMENTS_MB=${BENCH_SNAPSHOT_SEGMENTS_MB:-80}
SEGMENTS_SOURCE=${BENCH_SNAPSHOT_SEGMENTS_SOURCE:-$ROOT/../shared/fixtures/torch-snapshots/bcrafton_memory_snapshot.pickle}
DIR_FILES=${BENCH_SNAPSHOT_DIR_FILES:-150}
VIEWS=(summary peak oom timeline report "export --format memory-viz" "export --format csv")
PY_LOAD='import pickle, sys
for f in sys.argv[1:]:
    pickle.load(open(f, "rb"))'

# Rows of one table: each view of INPUT beside pickle.load of FILES (the input's files),
# the two alternated. Sets ROWS; RSS is compared with SIZE bytes.
bench_views() {
    local input=$1 size=$2 label=$3
    shift 3
    local files=("$@") v args py vt py_s py_kib vt_s vt_kib speed memory
    ROWS=()
    for v in "${VIEWS[@]}"; do
        # shellcheck disable=SC2206 # the view's words
        args=($v)
        case $v in
            report) args+=(-o "$WORK/out.html") ;;
            export*) args+=(-o "$WORK/out") ;;
        esac
        say "snapshots ($label): pickle.load, then vramtrace $v, $RUNS times"
        py=(python3 -c "$PY_LOAD" "${files[@]}")
        vt=("$REL/vramtrace" "${args[@]}" "$input")
        read -r py_s py_kib vt_s vt_kib < <(alternated_best py vt)
        speed=$(ratio "$py_s" "$vt_s")
        memory=$(ratio "$((vt_kib * 1024))" "$size")
        ROWS+=("| \`$v\` | $vt_s s | $((vt_kib / 1024)) MiB | ${memory}x | $py_s s | $((py_kib / 1024)) MiB | ${speed}x |")
        le 5 "$speed" || miss "snapshot ($label): vramtrace $v took $vt_s s, pickle.load $py_s s: ${speed}x faster (target >= 5x)"
        le "$memory" 2 || miss "snapshot ($label): vramtrace $v peaked at ${memory}x the file's size (target <= 2x)"
    done
}

table() {
    echo "| view | vramtrace | peak RSS | RSS / file | pickle.load | its peak RSS | pickle.load / vramtrace |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    for r in "${ROWS[@]}"; do echo "$r"; done
}

machine() {
    echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
}

echo "## 6. Large PyTorch snapshots"
echo
echo "Each view is run right after Python's own \`pickle.load\` of the same file(s) (\`python3 -c\` of \`for f in sys.argv[1:]: pickle.load(open(f, \"rb\"))\`, $(python3 --version 2>&1)), the two alternated $RUNS times, the least wall time of each kept, from a warm page cache; wall time and peak RSS from \`/usr/bin/time\`. Exports and the report write to a file (the last run's removed and the page cache written back before each run, outside the timing)."
echo
echo "Targets: at least 5x faster than \`pickle.load\` of the same file, in at most 2x the file's size; a directory of many snapshots in at most 2x the memory of its largest one alone."

# ---- a history-heavy file ----
BIG=$WORK/big.pickle
say "snapshots: generating about $MB MB from $(basename "$SOURCE")"
read -r ENTRIES SEGMENTS BLOCKS < <(python3 scripts/big-snapshot.py "$SOURCE" "$BIG" "$MB")
SIZE=$(stat -c %s "$BIG")
cat "$BIG" > /dev/null # a warm page cache for both readers
bench_views "$BIG" "$SIZE" history "$BIG"
rm -f "$BIG"
echo
echo "### A history-heavy file"
echo
echo "A $((SIZE / 1048576)) MiB snapshot ($ENTRIES history entries, $SEGMENTS segments, $BLOCKS blocks) written by \`scripts/big-snapshot.py\` from the real \`$(basename "$SOURCE")\` (its history repeated, frame lists shared as PyTorch's pickler shares them). $(machine)"
echo
table

# ---- a segment-heavy file ----
SEG=$WORK/segments.pickle
say "snapshots: generating about $SEGMENTS_MB MB of segments from $(basename "$SEGMENTS_SOURCE")"
read -r ENTRIES SEGMENTS BLOCKS < <(python3 scripts/big-snapshot.py --segments "$SEGMENTS_SOURCE" "$SEG" "$SEGMENTS_MB")
SIZE=$(stat -c %s "$SEG")
cat "$SEG" > /dev/null
bench_views "$SEG" "$SIZE" segments "$SEG"
rm -f "$SEG"
echo
echo "### A segment-heavy file"
echo
echo "A $((SIZE / 1048576)) MiB snapshot ($ENTRIES history entries, $SEGMENTS segments, $BLOCKS blocks) written by \`scripts/big-snapshot.py --segments\` from the real \`$(basename "$SEGMENTS_SOURCE")\`: its history repeated, each copy at addresses past the one before, with the final segments copied likewise. $(machine)"
echo
table

# ---- a directory of snapshots ----
DIR=$WORK/ranks
mkdir "$DIR"
for i in $(seq 0 $((DIR_FILES - 1))); do cp "$SOURCE" "$DIR/snapshot_rank$i.pickle"; done
ONE=$DIR/snapshot_rank0.pickle
cat "$DIR"/* > /dev/null
DIR_SIZE=$(du -sb "$DIR" | cut -f1)
ROWS=()
for v in summary report; do
    args=("$v")
    [ "$v" = report ] && args+=(-o "$WORK/out.html")
    say "snapshots (directory): vramtrace $v of one file, then of the directory, $RUNS times"
    one=("$REL/vramtrace" "${args[@]}" "$ONE")
    all=("$REL/vramtrace" "${args[@]}" "$DIR")
    read -r one_s one_kib all_s all_kib < <(alternated_best one all)
    memory=$(ratio "$all_kib" "$one_kib")
    ROWS+=("| \`$v\` | $one_s s | $((one_kib / 1024)) MiB | $all_s s | $((all_kib / 1024)) MiB | ${memory}x |")
    le "$memory" 2 || miss "snapshot (directory): vramtrace $v of $DIR_FILES snapshots peaked at ${memory}x one snapshot's RSS (target <= 2x)"
done
say "snapshots (directory): pickle.load of every file, $RUNS times"
py=(python3 -c "$PY_LOAD" "$DIR"/*)
read -r py_s py_kib _ _ < <(alternated_best py py)
echo
echo "### A directory of snapshots"
echo
echo "$DIR_FILES snapshots of $(($(stat -c %s "$ONE") / 1024)) KiB (copies of the real \`$(basename "$SOURCE")\`, one per rank, $((DIR_SIZE / 1048576)) MiB in all), each view of the directory run right after the same view of one of them. Python's \`pickle.load\` of every file in turn: $py_s s, $((py_kib / 1024)) MiB. $(machine)"
echo
echo "| view | one snapshot | its peak RSS | the directory | its peak RSS | RSS, directory / one |"
echo "| --- | --- | --- | --- | --- | --- |"
for r in "${ROWS[@]}"; do echo "$r"; done
