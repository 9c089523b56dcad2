#!/usr/bin/env bash
# bench/retrieval.sh BUILD_DIR [N_DB N_QUERIES N_TRAIN RESIZE] — selfsup-retrieval beside VISSL's
# instance-retrieval flow in PyTorch, in one run.
#
# Both sides read the same revisited-layout dataset of photographs (bench/make-photo-corpus from
# Debian's mate-backgrounds; default 60 database images, 10 queries, 30 PCA training images) and
# the same torchvision resnet50 weights, and compute VISSL's R-MAC on res4 at RESIZE (default
# 448) with a 256-component PCA learned on the training images, then the query × database
# similarities: build/selfsup-retrieval (--similarities), and bench/retrieval_bench.py run
# (Debian's /usr/bin/python3: VISSL's functions in torch on the CPU, the trunk stopped at res4
# as VISSL's feature extractor stops). Every core on both sides. Prints a Markdown row: the
# images, each side's seconds (selfsup: the whole process, from the config to the results file;
# torch: from the model in memory to the similarities), ratio = torch seconds / selfsup seconds
# (> 1: selfsup is faster), and the largest difference between the similarities over the
# largest similarity.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
n_db=${2:-60} n_q=${3:-10} n_train=${4:-30} resize=${5:-448}
cd "$(dirname "$0")/.."
python=/usr/bin/python3
bin="$build/selfsup-retrieval"
[[ -x $bin ]] || { echo "bench/retrieval.sh: $bin not found; build it with: make $bin" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/selfsup-retrieval-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
threads=$(nproc)

./bench/make-photo-corpus $((n_db + n_q + n_train)) "$work/photos" >/dev/null
"$python" bench/retrieval_bench.py gen "$work/photos" "$work/data" "$n_db" "$n_q" "$n_train"
cat >"$work/retrieval.yaml" <<YAML
config:
  MACHINE: {DEVICE: cpu}
  CHECKPOINT: {DIR: $work/out}
  MODEL:
    TRUNK: {NAME: resnet, RESNETS: {DEPTH: 50}}
    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: True, FREEZE_TRUNK_ONLY: True, EXTRACT_TRUNK_FEATURES_ONLY: True,
                            SHOULD_FLATTEN_FEATS: False, LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res4, [Identity, []]]]}
    WEIGHTS_INIT: {PARAMS_FILE: $work/data/resnet50.pth, STATE_DICT_KEY_NAME: '', APPEND_PREFIX: trunk.base_model._feature_blocks.}
  IMG_RETRIEVAL: {DATASET_PATH: $work/data, TRAIN_DATASET_NAME: rparis6k, EVAL_DATASET_NAME: roxford5k,
                  RESIZE_IMG: $resize, FEATS_PROCESSING_TYPE: rmac, SPATIAL_LEVELS: 3, N_PCA: 256}
YAML
t0=$(date +%s.%N)
"$bin" -c "$work/retrieval.yaml" --threads 0 --similarities "$work/selfsup_sim.npy" >"$work/selfsup.log" 2>&1 ||
    { cat "$work/selfsup.log" >&2; exit 1; }
t1=$(date +%s.%N)
torch_line=$("$python" bench/retrieval_bench.py run "$work/data" "$resize" 256 "$threads" "$work/torch_sim.npy")

echo "| images (db + queries + PCA) | RESIZE | selfsup s | PyTorch s | ratio | max sim difference / max sim |"
echo "|---|--:|--:|--:|--:|--:|"
"$python" - "$work" "$t0" "$t1" "$torch_line" "$n_db" "$n_q" "$n_train" "$resize" <<'PY'
import sys
import numpy as np
work, t0, t1, line, n_db, n_q, n_train, resize = sys.argv[1:]
mine, ref = np.load(f"{work}/selfsup_sim.npy"), np.load(f"{work}/torch_sim.npy")
secs, torch_secs = float(t1) - float(t0), float(line.split()[1])
diff = np.abs(mine - ref).max() / np.abs(ref).max()
print(f"| {n_db} + {n_q} + {n_train} | {resize} | {secs:.1f} | {torch_secs:.1f} | {torch_secs / secs:.2f} | {diff:.1e} |")
PY
