#!/usr/bin/env bash
# bench/trunks.sh BUILD_DIR — the model engine (build/bench/trunk_bench) beside PyTorch
# (bench/trunk_bench.py, Debian's python3-torch + torchvision) on the same trunks, same threads,
# in one run: ResNet-50 at 224 batch 16, ResNet-18 small-stem at 32 px batch 128, ResNet-18 at
# 32 px through the ImageNet stem, batch 256 (the quickstarts' trunk; res5 is a 1 × 1 map), and
# ResNet-18 at 24 px batch 288 (the Jigsaw quickstart's step: 9 patches of 32 images), and
# RegNetY-400MF at 224 batch 16 (torchvision's regnet_y_400mf is ClassyVision's network), and
# EfficientNet-B0 at 224 batch 16 (torchvision's efficientnet_b0: bench/trunk_bench.py says how
# it differs from ClassyVision's), and VISSL's RotNet and BVLC AlexNets at batch 64.
# train = forward (train mode) + backward, no optimizer step on either side; infer = eval
# forward. TRUNKS_ROUNDS rounds (default 3) alternate the two sides; prints a Markdown table
# with the median images/s and the median ratio = selfsup / PyTorch (> 1: faster), and the
# BLAS each side used (bench/peers.sh installs OpenBLAS for torch when missing). TRUNKS=TEXT runs
# only the rows whose label contains TEXT (TRUNKS=ResNet-18: the small-image rows).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install
bench="$build/bench/trunk_bench"
python=/usr/bin/python3
[[ -x $bench ]] || { echo "bench/trunks.sh: $bench not found (make $bench)" >&2; exit 2; }
threads=$(nproc)
reps=${TRUNKS_REPS:-${RESNET_REPS:-1}}
rounds=${TRUNKS_ROUNDS:-${RESNET_ROUNDS:-3}}

echo "## trunks: model engine (cpu) vs PyTorch $("$python" -c 'import torch; print(torch.__version__)')"
echo
echo "Machine: $(nproc) cores, $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $threads threads on both sides; $rounds alternating rounds (selfsup, then PyTorch, each the median of $reps after a warm-up), medians; $(date -u '+%Y-%m-%d %H:%M UTC')."
selfsup_blas_line "$(onednn_version): its convolutions and dnnl_sgemm (own JIT kernels, no system BLAS)."
peers_blas_line torch torchvision
echo "(PyTorch: convolutions through oneDNN where its heuristics pick it, other convolutions' GEMMs and matrix products through that BLAS.)"
echo
echo "| model | mode | selfsup img/s | PyTorch img/s | ratio | ratios, each round |"
echo "|---|---|--:|--:|--:|---|"
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# Both sides alternate round by round, so they are measured in the same minutes (this shared
# VM's speed drifts by ±20% over minutes); the ratio is the median of the per-round ratios.
run() {
    local label=$1
    shift
    [[ $label == *"${TRUNKS:-}"* ]] || return 0
    declare -A a b r
    for ((k = 0; k < rounds; k++)); do
        local ours theirs
        ours=$("$bench" --threads "$threads" --reps "$reps" "$@")
        theirs=$("$python" bench/trunk_bench.py --threads "$threads" --reps "$reps" "$@")
        for mode in train infer; do
            local x y
            x=$(awk -v m=$mode '$2 == m {print $3}' <<<"$ours")
            y=$(awk -v m=$mode '$2 == m {print $3}' <<<"$theirs")
            a[$mode]+="$x " b[$mode]+="$y " r[$mode]+="$(echo "$x / $y" | bc -l) "
        done
    done
    for mode in train infer; do
        printf '| %s | %s | %.1f | %.1f | %.2f | %s |\n' "$label" "$mode" "$(median <<<"${a[$mode]}")" \
            "$(median <<<"${b[$mode]}")" "$(median <<<"${r[$mode]}")" \
            "$(tr ' ' '\n' <<<"${r[$mode]}" | grep . | xargs printf '%.2f ' | sed 's/ $//')"
    done
}
run "ResNet-50, 224 px, batch 16" --depth 50 --size 224 --batch 16
run "ResNet-18 small stem, 32 px, batch 128" --depth 18 --size 32 --batch 128 --small-stem
run "ResNet-18, 32 px, batch 256" --depth 18 --size 32 --batch 256
run "ResNet-18, 24 px, batch 288" --depth 18 --size 24 --batch 288
run "RegNetY-400MF, 224 px, batch 16" --regnet regnet_y_400mf --size 224 --batch 16
run "EfficientNet-B0, 224 px, batch 16" --efficientnet B0 --size 224 --batch 16
run "AlexNet (RotNet's), 224 px, batch 64" --alexnet rotnet --size 224 --batch 64
run "AlexNet (BVLC's), 227 px, batch 64" --alexnet bvlc --size 227 --batch 64
