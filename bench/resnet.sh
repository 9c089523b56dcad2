#!/usr/bin/env bash
# bench/resnet.sh BUILD_DIR — the model engine (build/bench/resnet_bench) beside PyTorch
# (bench/resnet_bench.py, Debian's python3-torch) on the same ResNet trunks, same threads,
# in one run: ResNet-50 at 224 batch 16 and ResNet-18 small-stem at 32 px batch 128.
# train = forward (train mode) + backward, no optimizer step on either side; infer = eval
# forward. Prints a Markdown table with images/s and ratio = selfsup / PyTorch (> 1: faster).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
bench="$build/bench/resnet_bench"
python=/usr/bin/python3
[[ -x $bench ]] || { echo "bench/resnet.sh: $bench not found (make $bench)" >&2; exit 2; }
threads=$(nproc)
reps=${RESNET_REPS:-3}

echo "## resnet: model engine (cpu) vs PyTorch $("$python" -c 'import torch; print(torch.__version__)')"
echo
echo "Machine: $(nproc) cores, $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $threads threads on both sides; median of $reps after a warm-up; $(date -u '+%Y-%m-%d %H:%M UTC')."
echo
echo "| model | mode | selfsup img/s | PyTorch img/s | ratio |"
echo "|---|---|--:|--:|--:|"
run() {
    local label=$1
    shift
    local ours theirs
    ours=$("$bench" --threads "$threads" --reps "$reps" "$@")
    theirs=$("$python" bench/resnet_bench.py --threads "$threads" --reps "$reps" "$@")
    for mode in train infer; do
        local a b
        a=$(awk -v m=$mode '$2 == m {print $3}' <<<"$ours")
        b=$(awk -v m=$mode '$2 == m {print $3}' <<<"$theirs")
        printf '| %s | %s | %.1f | %.1f | %.2f |\n' "$label" "$mode" "$a" "$b" "$(echo "$a / $b" | bc -l)"
    done
}
run "ResNet-50, 224 px, batch 16" --depth 50 --size 224 --batch 16
run "ResNet-18 small stem, 32 px, batch 128" --depth 18 --size 32 --batch 128 --small-stem
