#!/usr/bin/env bash
# bench/methods.sh [BUILD_DIR] [N] — training speed of every method's quickstart on the CPU:
# `selfsup run quickstart/NAME` (decode → augment workers → collate → train) beside the same
# recipe the PyTorch/VISSL way (bench/methods_bench.py: the quickstart's YAML built as VISSL
# builds it — a DataLoader with its NUM_DATALOADER_WORKERS workers doing PIL decode and the
# transforms, its collator, torchvision's ResNet with VISSL's heads, VISSL's loss and hooks
# re-stated, SGD/LARC on VISSL's parameter groups — torch on as many threads as cores). One
# epoch over the first N Fashion-MNIST images (default 7680) each, the two sides one after the
# other for each method in turn, so that both are measured in the same minutes.
#
# METHODS="simclr swav ..." picks the quickstarts (default: all of them; clusterfit_train trains
# on random cluster labels, as its speed does not depend on them). SELFSUP_OVERRIDES adds
# overrides to every selfsup run (e.g. config.MACHINE.CPU_WINOGRAD=false). Each side reports images/s
# (the batch over the median step time after the first 5 steps: DeepClusterV2's memory pass and
# k-means land in the first step on selfsup's side and before it on PyTorch's) and the share of
# the timed steps spent waiting for data. Exits non-zero when a side fails; never on a time.
set -euo pipefail
build=${1:-build}
n=${2:-${N:-7680}}
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install
python=/usr/bin/python3
list=data/fashion-mnist/disk_filelist/train_images.npy
read -r -a methods <<<"${METHODS:-simclr swav moco npid pirl deepclusterv2 rotnet jigsaw supervised clusterfit_train}"
[[ -x $build/selfsup ]] || { echo "bench/methods.sh: no $build/selfsup (make -j$(nproc) all)" >&2; exit 1; }
[[ -f $list ]] || "$build/selfsup" dataset fashion-mnist data/fashion-mnist >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
labels=$work/cluster_labels.npy
failed=0
t_start=$SECONDS
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# Random "cluster" labels (100 classes) for clusterfit_train, one per file-list entry.
"$python" -c 'import numpy as np, sys; n = len(np.load(sys.argv[1], allow_pickle=True))
np.save(sys.argv[2], np.random.default_rng(0).integers(0, 100, n).astype(np.int64))' "$list" "$labels"

# The extra `selfsup run` overrides of NAME: one epoch's schedule, clusterfit_train's labels.
overrides() {
    "$python" bench/methods_bench.py overrides "$1"
    [[ $1 != clusterfit_train ]] || echo "config.DATA.TRAIN.LABEL_PATHS=[$labels]"
}

# selfsup_side NAME: one epoch of quickstart/NAME; prints methods_bench.py stats' two lines.
selfsup_side() {
    local dir=$work/$1 extra more
    mapfile -t extra < <(overrides "$1")
    read -r -a more <<<"${SELFSUP_OVERRIDES:-}"
    extra+=("${more[@]}")
    "$build/selfsup" run "quickstart/$1" --run-dir "$dir/run" config.DATA.TRAIN.DATA_LIMIT="$n" \
        config.OPTIMIZER.num_epochs=1 config.LOG_FREQUENCY=1 config.TEST_MODEL=False \
        config.CHECKPOINT.DIR="$dir/ckpt" config.CHECKPOINT.AUTO_RESUME=False "${extra[@]}" >"$dir/selfsup.log" 2>&1 &&
        "$python" bench/methods_bench.py stats "$1" "$dir/ckpt/stdout.json"
}

# torch_side NAME: the same epoch with methods_bench.py; prints its torch_train/breakdown lines.
torch_side() {
    local dir=$work/$1 lab=()
    [[ $1 != clusterfit_train ]] || lab=(--labels "$labels")
    "$python" bench/methods_bench.py train "$1" --filelist "$list" --n "$n" --threads "$(nproc)" "${lab[@]}" \
        >"$dir/torch.log" 2>&1 && grep -v '^#' "$dir/torch.log"
}

# A side that failed: its log's end on stderr, and the run will exit non-zero.
side_failed() {
    echo "bench/methods.sh: $1's $2 side failed; the end of $3:" >&2
    tail -15 "$3" >&2
    failed=1
}

for m in "${methods[@]}"; do
    mkdir -p "$work/$m"
    echo "bench/methods.sh: $m: selfsup ..." >&2
    selfsup_side "$m" >"$work/$m/selfsup.out" || side_failed "$m" selfsup "$work/$m/selfsup.log"
    echo "bench/methods.sh: $m: PyTorch ..." >&2
    torch_side "$m" >"$work/$m/torch.out" || side_failed "$m" PyTorch "$work/$m/torch.log"
    echo "bench/methods.sh: $m done at $((SECONDS - t_start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

# line FILE KEY: the fields after KEY on FILE's line that starts with it (empty if none).
line() { sed -n "s/^$2 //p" "$1"; }

# pct SHARE: a share as a percentage.
pct() { printf '%.1f%%' "$(echo "$1 * 100" | bc -l)"; }

echo "## methods: every quickstart's training speed on the CPU, selfsup vs PyTorch $("$python" -c 'import torch; print(torch.__version__)')"
echo
echo "Machine: $(nproc) cores, $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load average $load_start at the start," \
    "$(cut -d' ' -f1-3 /proc/loadavg) at the end; $n images per method, one epoch each side; $(date -u '+%Y-%m-%d %H:%M UTC')."
selfsup_blas_line "$(onednn_version): its convolutions and dnnl_sgemm (own JIT kernels, no system BLAS)."
peers_blas_line torch torchvision
echo
echo "| method | selfsup img/s | PyTorch img/s | ratio (selfsup/PyTorch) | data wait selfsup | data wait PyTorch | steps |"
echo "|---|--:|--:|--:|--:|--:|--:|"
for m in "${methods[@]}"; do
    ours=$(line "$work/$m/selfsup.out" selfsup_train)
    theirs=$(line "$work/$m/torch.out" torch_train)
    if [[ -z $ours || -z $theirs ]]; then
        echo "| $m | ${ours:+ok}${ours:-failed} | ${theirs:+ok}${theirs:-failed} | | | | |"
        continue
    fi
    read -r a aw as <<<"$ours"
    read -r b bw bs <<<"$theirs"
    printf '| %s | %.1f | %.1f | %.2f | %s | %s | %s |\n' "$m" "$a" "$b" "$(echo "$a / $b" | bc -l)" \
        "$(pct "$aw")" "$(pct "$bw")" "$as$([[ $as == "$bs" ]] || echo " / $bs")"
done
echo
echo "Where a step's time goes, mean ms per step after the first 5 (selfsup: stdout.json's timers,"
echo "forward with the input's normalisation and upload; PyTorch: timed around each call, the loss"
echo "with its hooks' work: MoCo's encoder, the memory banks):"
echo
echo "| method | side | data wait | forward | loss | backward | optimizer |"
echo "|---|---|--:|--:|--:|--:|--:|"
for m in "${methods[@]}"; do
    for side in "selfsup selfsup" "torch PyTorch"; do
        read -r file label <<<"$side"
        parts=$(line "$work/$m/$file.out" "${file}_breakdown")
        if [[ -n $parts ]]; then
            echo "| $m | $label | ${parts// / | } |"
        fi
    done
done
echo
echo "Run time: $((SECONDS - t_start)) s."
exit "$failed"
