#!/usr/bin/env bash
# bench/svm.sh BUILD_DIR [NxMxDxC...] — selfsup-svm beside VISSL's sklearn SVM path, in one run.
#
# For each size (train N, test M, dimension D, classes C; default 1000x1000x256x10 and
# 5000x5000x2048x20), bench/svm_bench.py writes synthetic VOC07-like features, then both sides
# run the VOC07 protocol on the same files with the same costs (SVM_BENCH_COSTS, default
# 0.01,0.1,1,10) and 3 folds: VISSL's SVMTrainer.train + test with sklearn (bench/svm_bench.py,
# Debian's /usr/bin/python3) and BUILD_DIR/selfsup-svm standalone. Prints a Markdown table
# with both times, ratio = sklearn seconds / selfsup seconds (> 1: selfsup is faster) and both
# mAPs, then the BLAS each side used (bench/peers.sh installs OpenBLAS for numpy/scipy/sklearn
# when missing). Exits non-zero when a side fails or the mAPs differ by more than 0.1 point.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000x1000x256x10 5000x5000x2048x20)
costs=${SVM_BENCH_COSTS:-0.01,0.1,1,10}

svm="$build/selfsup-svm"
python=/usr/bin/python3
if [[ ! -x $svm ]]; then
    echo "bench/svm.sh: $svm not found; build it with: make $svm" >&2
    exit 2
fi
if ! "$python" -c 'import sklearn, numpy' 2>/dev/null; then
    echo "bench/svm.sh: $python cannot import sklearn; install python3-sklearn (make deps)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-svm-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Run one side; on failure show what it printed and stop.
run_side() {
    local name=$1 out=$2
    shift 2
    if ! "$@" >"$out" 2>"$out.err"; then
        echo "bench/svm.sh: the $name side failed: $*" >&2
        cat "$out" "$out.err" >&2
        exit 1
    fi
}

rows=()
status=0
for size in "${sizes[@]}"; do
    IFS=x read -r ntrain ntest dim ncls <<<"$size"
    dir="$work/$size"
    mkdir -p "$dir"
    "$python" bench/svm_bench.py gen --dir "$dir" --train "$ntrain" --test "$ntest" --dim "$dim" --classes "$ncls"
    echo "svm $size: sklearn (VISSL's path) ..." >&2
    run_side sklearn "$dir/sklearn.txt" "$python" bench/svm_bench.py vissl --dir "$dir" --costs "$costs"
    echo "svm $size: selfsup-svm ..." >&2
    t0=$(date +%s.%N)
    run_side selfsup "$dir/selfsup.txt" "$svm" --train-features "$dir/train_features.npy" \
        --train-targets "$dir/train_targets.npy" --test-features "$dir/test_features.npy" \
        --test-targets "$dir/test_targets.npy" --output "$dir/out" --costs "$costs" --folds 3
    t1=$(date +%s.%N)
    sk_s=$(awk '/^# seconds/ {print $3}' "$dir/sklearn.txt")
    sk_map=$(awk '/^# mAP/ {print $3}' "$dir/sklearn.txt")
    ss_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    ss_map=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["features"]["mAP"])' \
        "$dir/out/svm_results.json")
    verdict=$(awk -v a="$sk_map" -v b="$ss_map" 'BEGIN {d = a - b; if (d < 0) d = -d; print (d <= 0.1) ? "equal" : "DIFFERENT"}')
    [[ $verdict == equal ]] || status=1
    ratio=$(awk -v a="$sk_s" -v b="$ss_s" 'BEGIN {printf "%.1f", a / b}')
    rows+=("| $size | $costs | $sk_s | $ss_s | $ratio× | $sk_map | $ss_map | $verdict |")
done

echo "| train×test×dim×classes | costs | sklearn s | selfsup s | ratio | sklearn mAP | selfsup mAP | mAP (±0.1) |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "($(nproc) cores; selfsup's time includes loading the .npy files and writing VISSL's output files;"
echo " sklearn's excludes loading and pickling. See bench/svm.sh --help.)"
selfsup_blas_line "none (its own dense dual coordinate descent, liblinear's algorithm in C; the linked liblinear serves only primal and L1 problems, not VISSL's)."
peers_blas_line numpy scipy sklearn
exit $status
