#!/usr/bin/env bash
# bench/cluster.sh BUILD_DIR [NxDIMxK...] — selfsup-cluster beside VISSL's ClusterFit clustering
# (Python's FAISS), in one run.
#
# For each size (default 100000x512x1000 and 50000x2048x500; Gaussian blobs, 20 k-means
# iterations), both sides read the same feature file and run VISSL 0.1.5's
# cluster_features_and_label.py after its extraction: L2 norm + 1e-5, faiss.Kmeans, the nearest
# centroid of every row. selfsup: build/selfsup-cluster (Debian's libfaiss with its GEMM on
# oneDNN); reference: bench/cluster_bench.py in Debian's /usr/bin/python3 with python3-faiss on
# the system BLAS (bench/peers.sh installs OpenBLAS first). Two rounds, alternating, the faster
# of each side counting. Prints a Markdown table: seconds from the features in memory to the
# labels (selfsup's from its log), ratio = reference / selfsup (> 1: selfsup is faster), and the
# rows whose labels differ.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(100000x512x1000 50000x2048x500)
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install

cluster="$build/selfsup-cluster"
python=/usr/bin/python3
if [[ ! -x $cluster ]]; then
    echo "bench/cluster.sh: $cluster not found; build it with: make $cluster" >&2
    exit 2
fi
if ! "$python" -c 'import numpy, faiss' 2>/dev/null; then
    echo "bench/cluster.sh: $python cannot import numpy and faiss; install python3-faiss" >&2
    exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-cluster-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
niter=20
rows=()
start=$SECONDS

min() { awk -v a="$1" -v b="$2" 'BEGIN {print (a < b) ? a : b}'; }

# selfsup-cluster's k-means seconds (its "k-means done in S s" line, normalisation excluded:
# the line before it is logged after it) and the whole process.
run_selfsup() {
    local dir=$1 k=$2 t0 t1
    printf 'config:\n  CHECKPOINT: {DIR: "%s"}\n  CLUSTERFIT: {NUM_CLUSTERS: %s, N_ITER: %s, FEATURES: {DATASET_NAME: b, LAYER_NAME: res5}}\n' \
        "$dir" "$k" "$niter" >"$dir/c.yaml"
    t0=$(date +%s.%N)
    "$cluster" -c "$dir/c.yaml" --quiet >"$dir/selfsup.txt" 2>&1 || { cat "$dir/selfsup.txt" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$(sed -n 's/.*k-means done in \([0-9.]*\) s.*/\1/p' "$dir/selfsup.txt") $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')"
}

for s in "${sizes[@]}"; do
    [[ $s =~ ^[0-9]+x[0-9]+x[0-9]+$ ]] || { echo "bench/cluster.sh: size '$s' is not NxDIMxK" >&2; exit 2; }
    IFS=x read -r n dim k <<<"$s"
    dir="$work/$s"
    mkdir -p "$dir"
    echo "cluster: $s: features ..." >&2
    "$python" bench/cluster_bench.py gen --dir "$dir" --n "$n" --dim "$dim" --k "$k"
    best_s=1e9 best_p=1e9 best_v=1e9
    for round in 1 2; do
        echo "cluster: $s: round $round: selfsup, then VISSL's way ..." >&2
        read -r ks ps <<<"$(run_selfsup "$dir" "$k")"
        vs=$("$python" bench/cluster_bench.py run --dir "$dir" --k "$k" --niter "$niter" | awk '{print $2}')
        best_s=$(min "$ks" "$best_s")
        best_p=$(min "$ps" "$best_p")
        best_v=$(min "$vs" "$best_v")
    done
    differ=$("$python" -c "import numpy as np, sys; a = np.load(sys.argv[1]); b = np.load(sys.argv[2]); print(int((a != b).sum()))" \
        "$dir/b_train_N${k}_faiss_lbls.npy" "$dir/vissl_lbls.npy")
    rows+=("| $n × $dim → $k | $best_s | $best_p | $best_v | $(awk -v a="$best_v" -v b="$best_s" 'BEGIN {printf "%.2f", a / b}') | $differ of $n |")
done

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
echo "## cluster: selfsup-cluster vs VISSL's ClusterFit clustering (Python's FAISS $("$python" -c 'import faiss; print(faiss.__version__)'))"
echo
echo "Machine: $(nproc) cores, ${cpu:-unknown CPU}, $(uname -sr)."
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Both sides in this run ($((SECONDS - start)) s), two rounds alternating, the faster shown; $niter iterations."
selfsup_blas_line "FAISS's sgemm_ on dnnl_sgemm, $(onednn_version)."
peers_blas_line numpy faiss
echo
echo "| features → clusters | selfsup k-means s | selfsup process s | VISSL's way s | ratio | labels that differ |"
echo "|---|--:|--:|--:|--:|--:|"
printf '%s\n' "${rows[@]}"
echo
echo "k-means s: from the normalised features to the labels (VISSL's way: normalisation included,"
echo "a few ms); process s: the whole selfsup-cluster run, reading the file and writing the results."
