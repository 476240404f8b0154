# Shared by the benchmark scripts (sourced, never run): measuring a command, ratios, and
# the alternated best of two. Needs $WORK (a scratch directory) and $RUNS.

say() { echo "bench: $*" >&2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
rate() { awk -v e="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.0f", e / s; else print "-"}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}'; }

# "wall_s rss_kib" of one run of a command, its output discarded. The last run's output
# file (a CSV export of a 1 GB snapshot is 1.5 GB) is removed and the page cache written
# back first, outside the timing: deleting it, or writing it to disk, is not this run's work.
measure_once() {
    rm -f "$WORK"/out "$WORK"/out.html
    sync
    /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "$@" > /dev/null 2> "$WORK/err.txt" || {
        say "$* failed:"; tail -3 "$WORK/err.txt" >&2; }
    cat "$WORK/time.txt"
}

# "a_s a_kib b_s b_kib": commands A and B (the arrays named $1 and $2) run alternated
# $RUNS times, the least wall time of each kept with its peak RSS: the other programs on
# the machine come and go.
alternated_best() {
    local -n first=$1 second=$2
    local a_s= a_kib= b_s= b_kib= s kib
    for _ in $(seq "$RUNS"); do
        read -r s kib < <(measure_once "${first[@]}")
        if [ -z "$a_s" ] || le "$s" "$a_s"; then a_s=$s; a_kib=$kib; fi
        read -r s kib < <(measure_once "${second[@]}")
        if [ -z "$b_s" ] || le "$s" "$b_s"; then b_s=$s; b_kib=$kib; fi
    done
    echo "$a_s $a_kib $b_s $b_kib"
}
