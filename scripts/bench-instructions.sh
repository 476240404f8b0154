#!/usr/bin/env bash
# Instructions per intercepted call, counted by callgrind: unlike nanoseconds they do not
# move with the machine's load, so two builds can be compared on a busy machine.
#
#   scripts/bench-instructions.sh [ROOT]   # ROOT: a tree with a release build (default .)
#
# Runs bench_calls (tests/workloads/bench_calls.c) at 10 frames under vramtrace, with
# stacks off and with 32-frame stacks, for N and 2N pairs, and prints the difference per
# call, so that start-up and exit cancel out. valgrind runs vramtrace's writer on the
# program's thread at exit, so the figure is the hook and the writer together.
set -euo pipefail
ROOT=$(cd "${1:-$(dirname "$0")/..}" && pwd)
SIM=$ROOT/target/release/sim
LIB=$ROOT/target/release/libvramtrace.so
command -v valgrind >/dev/null || { echo "bench-instructions: needs valgrind" >&2; exit 2; }
[ -x "$SIM/bench_calls" ] && [ -f "$LIB" ] || {
    echo "bench-instructions: no release build in $ROOT (cargo build --release --workspace)" >&2
    exit 2
}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Instructions of every thread of one run of `pairs` pairs at stack depth $1.
instructions() {
    (cd "$WORK" && rm -f callgrind.out.* &&
        LD_LIBRARY_PATH=$SIM VRAMTRACE_OUTPUT="$WORK/trace-%p.jsonl" VRAMTRACE_STACK_DEPTH=$1 \
            LD_PRELOAD=$LIB valgrind --tool=callgrind --separate-threads=yes \
            "$SIM/bench_calls" cuda 10 "$2" >/dev/null 2>&1 &&
        cat callgrind.out.*-* | awk '/^summary:/ { s += $2 } END { print s }')
}

N=20000
for depth in 0 32; do
    a=$(instructions $depth $N)
    b=$(instructions $depth $((2 * N)))
    # bench_calls makes PAIRS/10 + 1 warm-up pairs, then PAIRS: 2 calls per pair.
    calls=$((2 * (2 * N + 2 * N / 10 + 1) - 2 * (N + N / 10 + 1)))
    echo "stack depth $depth: $(((b - a) / calls)) instructions per call"
done
