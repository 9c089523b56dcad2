#!/usr/bin/env bash
# bench/ddp.sh BUILD_DIR — the shm collectives' all-reduce beside one core's memcpy, in one run.
#
# Runs build/bench/coll_bench (bench/coll_bench.c) for 2 and 4 processes on ResNet-50's
# 25,557,032 fp32 gradients and on 1 MiB (262,144 fp32): the median time of an all-reduce
# (sum) among the ranks, and of one memcpy of the same buffer. Prints a Markdown table and
# whether the target is met (an all-reduce of ResNet-50's gradients among 2 processes within
# 3x one memcpy of them). Exits non-zero only when the benchmark fails (a wrong sum, a crash).
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
cd "$(dirname "$0")/.."
bench="$build/bench/coll_bench"
[[ -x $bench ]] || { echo "bench/ddp.sh: $bench not found (make $bench, or make bench)" >&2; exit 2; }

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
echo "## ddp: shm all-reduce vs memcpy"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Median of 7 after 1 warm-up on each side."
echo
echo "| processes | values (fp32) | all-reduce ms | memcpy ms | all-reduce / memcpy | all-reduce GB/s per rank |"
echo "|--:|--:|--:|--:|--:|--:|"
target=""
for world in 2 4; do
    for count in 25557032 262144; do
        echo "ddp: $world processes, $count values ..." >&2
        line=$("$bench" --world "$world" --count "$count" --reps 7 | grep '^coll_bench all_reduce')
        read -r _ _ w n t m <<<"$line"
        awk -v w="$w" -v n="$n" -v t="$t" -v m="$m" 'BEGIN {
            printf "| %d | %d | %.2f | %.2f | %.2f | %.2f |\n", w, n, t * 1e3, m * 1e3, t / m, n * 4 / t / 1e9 }'
        if [[ $world == 2 && $count == 25557032 ]]; then
            target=$(awk -v t="$t" -v m="$m" 'BEGIN { r = t / m; printf "%s (%.2fx)", r <= 3 ? "met" : "NOT met", r }')
        fi
    done
done
echo
echo "Target (issue 22): ResNet-50's gradients all-reduced among 2 processes within 3x one memcpy: $target."
echo "GB/s per rank: the buffer's bytes over the all-reduce's time. The per-step overhead of 2 trainers"
echo "against 1 waits for the trainer's data-parallel step."
