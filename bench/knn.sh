#!/usr/bin/env bash
# bench/knn.sh BUILD_DIR [TRAINxDIMxTEST...] — selfsup-knn beside VISSL's torch kNN and FAISS, in
# one run.
#
# For each size (default 50000x512x10000 20000x2048x5000; 100 classes of Gaussian clusters,
# bench/knn_bench.py gen), every side reads the same .npy files and runs VISSL's benchmark with
# L2_NORM_FEATS, SIGMA 0.1, TOPK 200: build/selfsup-knn standalone (oneDNN's sgemm), and in
# bench/knn_bench.py run (Debian's /usr/bin/python3) tools/nearest_neighbor_test.py's
# computation in torch on the CPU and the same benchmark with FAISS (IndexFlatIP exact search,
# then VISSL's weighted vote), each with every core and with 1 thread, the faster counting (on a
# loaded machine every core can be the slower). bench/peers.sh first installs OpenBLAS and
# python3-faiss when missing, so torch and FAISS run on an optimised BLAS; the BLAS each side
# used is printed. Prints a Markdown table: the kNN times (from features in memory to
# top-1/top-5), selfsup's whole process time (with reading the files), ratio = peer seconds /
# selfsup seconds for torch and for FAISS (> 1: selfsup is faster), every side's top-1/top-5
# and the test rows whose five predictions differ from selfsup's. Exits non-zero when the
# accuracies differ.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(50000x512x10000 20000x2048x5000)
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install

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

# One Markdown row from a size's outputs: selfsup.json, peers.txt, the three predictions files.
# Fails (after printing the row) when torch's or FAISS's top-1/top-5 differ from selfsup's.
table_row() {
    "$python" - "$@" <<'EOF'
import json, sys
import numpy as np
d, size, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
layer = next(iter(json.load(open(f"{d}/selfsup.json"))["layers"].values()))
mine = np.load(f"{d}/selfsup_predictions.npy")
peers = {}
for line in open(f"{d}/peers.txt"):
    tag, *f = line.split() or [""]
    if tag in ("knn_bench", "faiss_bench"):
        name = "torch" if tag == "knn_bench" else "faiss"
        differ = int((mine != np.load(f"{d}/{name}_predictions.npy")).any(axis=1).sum())
        peers[name] = (float(f[0]), float(f[1]), float(f[2]), int(f[3]), differ)
order = ("torch", "faiss")
secs = lambda p: f"{peers[p][0]:.3f} ({peers[p][3]})" if p in peers else "—"
ratio = lambda p: f"{peers[p][0] / layer['seconds']:.2f}" if p in peers else "—"
acc = lambda i, key: " / ".join([f"{layer[key]:.2f}"] + [f"{peers[p][i]:.2f}" if p in peers else "—" for p in order])
differ = " / ".join(str(peers[p][4]) if p in peers else "—" for p in order)
same = "torch" in peers and all(layer["top1"] == v[1] and layer["top5"] == v[2] for v in peers.values())
print(f"| {size} | {layer['seconds']:.3f} | {t1 - t0:.3f} | {secs('torch')} | {secs('faiss')} | {ratio('torch')} "
      f"| {ratio('faiss')} | {acc(1, 'top1')} | {acc(2, 'top5')} | {differ} | {'yes' if same else 'NO'} |")
sys.exit(0 if same else 3)
EOF
}

load=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-knn-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
params=(--sigma 0.1 --topk 200 --l2-norm)
rows=()
tries=()
bad=0
no_faiss=0
peer_blas=
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

    echo "knn: $s: torch (VISSL's code) and FAISS ..." >&2
    if ! "$python" bench/knn_bench.py run --dir "$dir" "${params[@]}" >"$dir/peers.txt" 2>&1; then
        echo "bench/knn.sh: the torch / FAISS side failed on $s:" >&2
        cat "$dir/peers.txt" >&2
        exit 1
    fi
    row=$(table_row "$dir" "$s" "$t0" "$t1") || bad=1
    rows+=("$row")
    peer_blas=$(sed -n 's/^# BLAS /BLAS, reference side /p' "$dir/peers.txt")
    if grep -q '^# faiss: not installed' "$dir/peers.txt"; then no_faiss=1; fi
    # "# torch on 2 threads: 17.1 s" lines: every thread count's time, not only the faster.
    tries+=("$s: $(awk '/^# (torch|faiss) on [0-9]+ threads:/ {printf "%s%s %s threads %s s", sep, $2, $4, $6; sep = ", "}' "$dir/peers.txt")")
done
elapsed=$((SECONDS - start))

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
faiss_version=$("$python" -c 'import faiss; print(faiss.__version__)' 2>/dev/null || echo "(not installed)")
echo "## knn: selfsup-knn vs VISSL's kNN in torch $torch_version and FAISS $faiss_version (CPU)"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(uname -sr)."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). All sides ran in this run (${elapsed}s), one run each."
echo "Features: 100 Gaussian classes; L2_NORM_FEATS, SIGMA 0.1, TOPK 200. selfsup on every core;"
echo "torch and FAISS each on every core and on 1 thread, the faster shown. Load average before: $load."
selfsup_blas_line "dnnl_sgemm on 256 x 1024 tiles, $(onednn_version) (its own JIT kernels, no system BLAS)."
echo "${peer_blas:-BLAS, reference side: not reported}"
echo
echo "| train x dim x test | selfsup kNN s | selfsup process s | torch kNN s (threads) | FAISS kNN s (threads) | ratio (torch/selfsup) | ratio (FAISS/selfsup) | top-1 selfsup / torch / FAISS | top-5 selfsup / torch / FAISS | rows whose top-5 differ from selfsup's (torch / FAISS) | same accuracy |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|"
printf '%s\n' "${rows[@]}"
echo
echo "kNN s: from features in memory to top-1/top-5 (selfsup: knn_run; torch: VISSL's loop; FAISS:"
echo "normalise, IndexFlatIP add + search, VISSL's vote); process s: the whole selfsup-knn run,"
echo "reading the .npy files included. Each peer's runs:"
printf -- '- %s\n' "${tries[@]}"
if [[ $no_faiss -ne 0 ]]; then
    echo "FAISS was NOT measured (python3-faiss is not installed): only the torch ratio is shown,"
    echo "and selfsup's lead over FAISS on an optimised BLAS can be much smaller."
fi
if [[ $bad -ne 0 ]]; then
    echo "bench/knn.sh: selfsup, torch and FAISS disagree on the accuracies above" >&2
    exit 1
fi
