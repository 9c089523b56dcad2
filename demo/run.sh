#!/usr/bin/env bash
# demo/run.sh BUILD_DIR — what `make demo` shows today, on selfsup's own configs.
#
# The demo walks a VISSL user through what selfsup does for real today: compose VISSL recipes,
# show the values VISSL would infer (effective batch sizes, crop counts, queue sizes, the
# auto-scaled LR schedule), refuse a broken config before anything runs, run the data pipeline
# (decode -> augment -> collate) of the quickstart recipes on Fashion-MNIST, which it converts
# once into data/fashion-mnist from Debian's dataset-fashion-mnist package, and then the main
# job: pre-train SimCLR's ResNet-18 on it (2 epochs, about 10 minutes on 2 cores), extract
# the features of that trunk and of the same trunk at random initialisation, and judge both with
# VISSL's kNN and linear-SVM benchmarks, in one table. Everything the main job writes is in one
# run directory, runs/demo-DATE-TIME, which the table names.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
selfsup="$build/selfsup"
say() { printf '\n== %s\n' "$*"; }

say "SimCLR's 8-node recipe, run on one process: VISSL auto-scales the LR to the batch"
"$selfsup" config show pretrain/simclr/simclr_8node_resnet \
    config.DISTRIBUTED.NUM_NODES=1 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 \
    --key config.OPTIMIZER.param_schedulers.lr 2>/dev/null | grep -E '^(name|start_value|end_value|update_interval):'

say "The same recipe on its 64 GPUs keeps the linear warm-up (per-node batch 512 -> LR 0.6 -> 4.8)"
"$selfsup" config show pretrain/simclr/simclr_8node_resnet \
    --key config.OPTIMIZER.param_schedulers.lr.schedulers 2>/dev/null

say "Its LR schedule over 10 epochs on one process (what the trainer will apply)"
"$selfsup" config lr pretrain/simclr/simclr_8node_resnet \
    config.DISTRIBUTED.NUM_NODES=1 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 config.OPTIMIZER.num_epochs=10 2>/dev/null

say "SwAV on 2 nodes with a multi-crop group file: crops, prototypes and queue sizes are inferred"
echo "   (queue_length 3840 is cut to a multiple of the global batch 64 x 16 = 1024)"
"$selfsup" config show pretrain/swav/swav_8node_resnet \
    +config/pretrain/swav/transforms=multicrop_2x224_6x96 config.DISTRIBUTED.NUM_NODES=2 \
    config.LOSS.swav_loss.queue.queue_length=3840 \
    --key config.LOSS.swav_loss 2>/dev/null | grep -E '^(num_crops|num_prototypes|embedding_dim|  queue_length|  local_queue_length|queue):'

say "Every quickstart config (sized for a 2-core CPU on Fashion-MNIST) composes"
for f in configs/quickstart/*.yaml; do
    "$selfsup" config show "$f" >/dev/null 2>&1 && echo "  ok  $f" || { echo "  FAILED  $f"; exit 1; }
done

say "A typo is refused before anything starts, with the file, the line and a suggestion (exit 2)"
bad=$(mktemp --suffix=.yaml)
trap 'rm -f "$bad"' EXIT
printf '# @package _global_\nconfig:\n  OPTIMIZER:\n    num_epoch: 100\n' > "$bad"
set +e
"$selfsup" config validate "$bad"
echo "  exit code: $?"
"$selfsup" config validate pretrain/simclr/simclr_8node_resnet config.LOSS.name=simclr_info_nce
echo "  exit code: $?"
set -e

# ---- processes: records, rings, transports and the orchestrator ----------------------------
# The trainer arrives with its issue; the test stages (a checkable producer, a pass-through
# worker, a checking consumer) show the plumbing on its own.
produce="$build/tests/selfsup-test-produce"
pass="$build/tests/selfsup-test-passthru"
check="$build/tests/selfsup-test-check"
work=$(mktemp -d)
trap 'rm -rf "$bad" "$work"' EXIT

say "Stages chain in a shell pipeline: framed records on stdin/stdout"
"$produce" --count 5000 --size 4096 | "$pass" | "$check" --expect 5000

say "The same stream cached to a file, then inspected"
"$produce" --count 3 --size 8 --out "file:$work/three.rec"
"$selfsup" inspect --values 8 "$work/three.rec"

# ---- the data pipeline on real data -----------------------------------------------------------
say "Fashion-MNIST (Debian's dataset-fashion-mnist) in VISSL's disk_folder and disk_filelist layouts"
"$selfsup" dataset fashion-mnist data/fashion-mnist
ls data/fashion-mnist/disk_folder/train | sed -n '1,3s/^/  /p'
echo "  ..."

say "The SimCLR quickstart's data path as a shell pipeline: decode | augment | collate (first 3 batches)"
"$build/selfsup-decode" -c quickstart/simclr config.DATA.TRAIN.DATA_LIMIT=48 2>/dev/null \
    | "$build/selfsup-augment" -c quickstart/simclr 2>/dev/null \
    | "$build/selfsup-collate" -c quickstart/simclr 2>/dev/null > "$work/simclr.rec"
"$selfsup" inspect --values 6 "$work/simclr.rec" | sed -n 1,7p

say "The same under selfsup run: decode -> augment x 2 -> collate over shared-memory rings, 10,000 images"
echo "   (selfsup-sink in the trainer's place saves the batches)"
"$selfsup" run quickstart/simclr --run-dir "$work/run" \
    "+config.SELFSUP.STAGES.train=selfsup-sink --save $work/run.rec" 2>&1 | grep -v 'run directory' || true
grep -h 'images decoded\|records/s' "$work/run/logs/decode.0.log" "$work/run/logs/train.0.log" | cut -d' ' -f3- | sed 's/^/  /'
"$selfsup" inspect --count "$work/run.rec" | sed 's/^/  /'

say "SwAV's multi-crop (2x28 + 4x14 px, multicrop_collator): one tensor per crop, crop by crop"
"$build/selfsup-decode" -c quickstart/swav config.DATA.TRAIN.DATA_LIMIT=64 2>/dev/null \
    | "$build/selfsup-augment" -c quickstart/swav 2>/dev/null \
    | "$build/selfsup-collate" -c quickstart/swav 2>/dev/null > "$work/swav.rec"
"$selfsup" inspect --values 4 "$work/swav.rec" | sed -n 1,6p

say "1 or 3 augment workers give byte-identical batches (randomness keyed by sample, not worker)"
for w in 1 3; do
    "$selfsup" run quickstart/simclr --run-dir "$work/w$w" config.DATA.NUM_DATALOADER_WORKERS=$w \
        config.DATA.TRAIN.DATA_LIMIT=640 "+config.SELFSUP.STAGES.train=selfsup-sink --save $work/w$w.rec" >/dev/null 2>&1
done
cmp "$work/w1.rec" "$work/w3.rec" && echo "  identical: $(sha256sum < "$work/w1.rec" | cut -c1-16)..."

say "Plumbing with the test stages: 20,000 records of 150 KB through the rings"
cat > "$work/run.yaml" <<YAML
config:
  DATA: {NUM_DATALOADER_WORKERS: 2}
  DISTRIBUTED: {NUM_PROC_PER_NODE: 1}
  SELFSUP:
    RING: {SLOT_BYTES: 1048576, DEPTH: 8}
    STAGES:
      decode: "$produce --count 20000 --size 150528"
      augment: "$pass"
      collate: "$pass"
      train: "$check --expect 20000"
YAML
"$selfsup" run "$work/run.yaml" --run-dir "$work/plumb"
grep -h 'check:' "$work/plumb/logs/train.0.log"

say "A stage that dies stops the whole run within a second, named, with its last lines (exit 1)"
sed -i "s|augment: \"$pass\"|augment: \"$pass --crash-after 500\"|" "$work/run.yaml"
set +e
"$selfsup" run "$work/run.yaml" --run-dir "$work/run2" &
pid=$!
wait $pid
echo "  exit code: $?"
set -e
echo "  its shared-memory segments left in /dev/shm: $(ls /dev/shm | grep -c "^selfsup\.$pid\." || true)"

# ---- the main job: pre-train, extract, evaluate ----------------------------------------------
run="runs/demo-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run"
say "Main job: SimCLR pre-training, ResNet-18 on 10,000 Fashion-MNIST images x 2 epochs (about 10 min on 2 cores)"
echo "   (decode -> augment x 2 -> collate -> train over shared-memory rings; the small-image stem of SimCLR's"
echo "    CIFAR recipe; two 28 px views of crops, flips, SimCLR's jitter and blur and BYOL's solarisation;"
echo "    NT-Xent at temperature 0.2, batch 16, SGD + LARC with SimCLR's small-batch LR 0.075 x sqrt(16) = 0.3,"
echo "    cosine; configs/quickstart/simclr.yaml)"
t0=$SECONDS
"$selfsup" run quickstart/simclr --run-dir "$run/pretrain" config.DATA.TRAIN.DATA_LIMIT=10000 \
    config.OPTIMIZER.num_epochs=2 config.LOG_FREQUENCY=100 config.CHECKPOINT.DIR="$run/simclr" 2>&1 \
    | grep -v 'run directory\|INFO decode' || true
pretrain_s=$((SECONDS - t0))
grep -h 'iter:' "$run/pretrain/logs/train.0.log" | sed -n '1p;$p' | cut -d' ' -f4- | sed 's/^/  /'
[[ -e $run/simclr/checkpoint.torch ]] || { echo "  pre-training left no checkpoint" >&2; exit 1; }

# Features of the train split (10,000 images) and the test split (10,000) for one trunk, then
# VISSL's kNN (k = 20, sigma 0.1, L2-normalised) and SVMs (one-vs-rest, costs 0.1 and 1, 3-fold CV).
evaluate() {
    local name=$1 weights=$2 out="$run/$1" t0=$SECONDS
    "$selfsup" run quickstart/extract_features --run-dir "$out/extract" \
        config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$weights" config.CHECKPOINT.DIR="$out/features" >/dev/null 2>&1 \
        || { echo "  extraction failed: see $out/extract/logs" >&2; exit 1; }
    "$build/selfsup-knn" -c quickstart/eval_knn config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$weights" \
        --features "$out/features" --output "$out/knn.json" > "$out/knn.txt" 2>&1
    "$build/selfsup-svm" -c quickstart/eval_svm config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$weights" \
        --features "$out/features" --output "$out/svm" > "$out/svm.txt" 2>&1
    echo $((SECONDS - t0)) > "$out/seconds"
}
say "Extract res4 (pooled 2x2) and res5avg features (eval mode) and run kNN + SVM: the pre-trained trunk, then the same trunk at random init"
evaluate simclr "$run/simclr/checkpoint.torch"
evaluate random ""
row() {
    /usr/bin/python3 - "$run/$1" "$2" "$3" <<'PY'
import json, sys
d, label, extra = sys.argv[1:]
knn = json.load(open(f"{d}/knn.json"))["layers"]
svm = json.load(open(f"{d}/svm/svm_results.json"))
secs = int(open(f"{d}/seconds").read())
cells = " | ".join(f"{knn[l]['top1']:6.2f} | {svm[l]['mAP']:6.2f}" for l in ("res4", "res5avg"))
print(f"| {label:<30} | {cells} | {extra}{secs} s |")
PY
}
# The pre-trained trunk's lead over random init, cell by cell (points).
margin() {
    /usr/bin/python3 - "$run/simclr" "$run/random" <<'PY'
import json, sys
a, b = sys.argv[1:]
def cells(d):
    knn = json.load(open(f"{d}/knn.json"))["layers"]
    svm = json.load(open(f"{d}/svm/svm_results.json"))
    return [v for l in ("res4", "res5avg") for v in (knn[l]["top1"], svm[l]["mAP"])]
print("| " + f"{'pre-trained minus random':<30} | " + " | ".join(f"{x - y:+6.2f}" for x, y in zip(cells(a), cells(b))) + " | |")
PY
}
say "Result (Fashion-MNIST test split, 10,000 images; kNN top-1 and SVM mAP per layer)"
echo "| method                         | res4 kNN | res4 SVM | res5avg kNN | res5avg SVM | time |"
echo "|--------------------------------|-------:|-------:|-------:|-------:|------|"
row simclr "SimCLR, 2 epochs (selfsup)" "pre-train ${pretrain_s} s + eval "
row random "same ResNet-18, random init" "eval "
margin
echo "  everything is in $run (checkpoints, features as .npy, SVM files, kNN/SVM JSON, logs)"
