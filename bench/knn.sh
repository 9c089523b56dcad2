#!/usr/bin/env bash
# bench/knn.sh BUILD_DIR [TRAINxDIMxTEST...] — selfsup-knn beside VISSL's torch kNN, in one run.
#
# For each size (default 50000x512x10000 20000x2048x5000; 100 classes of Gaussian clusters,
# bench/knn_bench.py gen), both sides read the same .npy files and run VISSL's benchmark with
# L2_NORM_FEATS, SIGMA 0.1, TOPK 200: build/selfsup-knn standalone, and tools/
# nearest_neighbor_test.py's computation in torch on the CPU (bench/knn_bench.py run, Debian's
# /usr/bin/python3) with every core and with 1 thread, the faster counting (on a loaded
# machine every core can be the slower). Prints a Markdown table: both kNN times (from
# features in memory to top-1/top-5), selfsup's whole process time (with reading the files),
# ratio = torch seconds / selfsup seconds (> 1: selfsup is faster), both top-1/top-5 and the
# test rows whose five predictions differ. Exits non-zero when the accuracies differ.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(50000x512x10000 20000x2048x5000)
cd "$(dirname "$0")/.."

knn="$build/selfsup-knn"
python=/usr/bin/python3
if [[ ! -x $knn ]]; then
    echo "bench/knn.sh: $knn not found; build it with: make $knn" >&2
    exit 2
fi
if ! "$python" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench/knn.sh: $python cannot import numpy and torch; install python3-numpy python3-torch" >&2
    exit 2
fi
for s in "${sizes[@]}"; do
    if [[ ! $s =~ ^[0-9]+x[0-9]+x[0-9]+$ ]]; then
        echo "bench/knn.sh: size '$s' is not TRAINxDIMxTEST (e.g. 50000x512x10000)" >&2
        exit 2
    fi
done

load=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-knn-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
params=(--sigma 0.1 --topk 200 --l2-norm)
rows=()
bad=0
start=$SECONDS
for s in "${sizes[@]}"; do
    IFS=x read -r ntrain dim ntest <<<"$s"
    dir="$work/$s"
    mkdir -p "$dir"
    echo "knn: $s: features ..." >&2
    "$python" bench/knn_bench.py gen --dir "$dir" --train "$ntrain" --test "$ntest" --dim "$dim" --classes 100

    echo "knn: $s: selfsup ..." >&2
    t0=$(date +%s.%N)
    if ! "$knn" --train-features "$dir/train_features.npy" --train-targets "$dir/train_targets.npy" \
        --test-features "$dir/test_features.npy" --test-targets "$dir/test_targets.npy" "${params[@]}" \
        --output "$dir/selfsup.json" --predictions "$dir/selfsup_predictions.npy" >"$dir/selfsup.txt" 2>&1; then
        echo "bench/knn.sh: selfsup-knn failed on $s:" >&2
        cat "$dir/selfsup.txt" >&2
        exit 1
    fi
    t1=$(date +%s.%N)

    echo "knn: $s: torch (VISSL's code) ..." >&2
    if ! "$python" bench/knn_bench.py run --dir "$dir" "${params[@]}" >"$dir/torch.txt" 2>&1; then
        echo "bench/knn.sh: the torch side failed on $s:" >&2
        cat "$dir/torch.txt" >&2
        exit 1
    fi

    row=$("$python" - "$dir" "$s" "$t0" "$t1" <<'EOF'
import json, sys
import numpy as np
d, size, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
layer = next(iter(json.load(open(f"{d}/selfsup.json"))["layers"].values()))
secs, top1, top5, threads = open(f"{d}/torch.txt").read().split("knn_bench ")[1].split()
secs, top1, top5 = float(secs), float(top1), float(top5)
mine, theirs = np.load(f"{d}/selfsup_predictions.npy"), np.load(f"{d}/torch_predictions.npy")
differ = int((mine != theirs).any(axis=1).sum())
same = layer["top1"] == top1 and layer["top5"] == top5
print(f"| {size} | {layer['seconds']:.3f} | {t1 - t0:.3f} | {secs:.3f} ({threads}) | {secs / layer['seconds']:.2f} "
      f"| {layer['top1']:.2f} / {top1:.2f} | {layer['top5']:.2f} / {top5:.2f} | {differ} | {'yes' if same else 'NO'} |")
sys.exit(0 if same else 3)
EOF
    ) || bad=1
    rows+=("$row")
done
elapsed=$((SECONDS - start))

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
echo "## knn: selfsup-knn vs VISSL's kNN in torch $torch_version (CPU)"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(uname -sr)."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Both sides ran in this run (${elapsed}s), one run each."
echo "Features: 100 Gaussian classes; L2_NORM_FEATS, SIGMA 0.1, TOPK 200. selfsup on every core;"
echo "torch on every core and on 1 thread, the faster shown. Load average before: $load."
echo
echo "| train x dim x test | selfsup kNN s | selfsup process s | torch kNN s (threads) | ratio (torch/selfsup) | top-1 selfsup / torch | top-5 selfsup / torch | rows whose top-5 differ | same accuracy |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|:-:|"
printf '%s\n' "${rows[@]}"
echo
echo "kNN s: from features in memory to top-1/top-5 (selfsup: knn_run; torch: VISSL's loop);"
echo "process s: the whole selfsup-knn run, reading the .npy files included."
if [[ $bad -ne 0 ]]; then
    echo "bench/knn.sh: selfsup and torch disagree on the accuracies above" >&2
    exit 1
fi
