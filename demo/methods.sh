#!/usr/bin/env bash
# demo/methods.sh [BUILD_DIR] [EPOCHS] — every self-supervised method selfsup trains, side by side.
# (LIMIT=N pre-trains on the first N images only: a quick look that the script runs;
# METHODS="a b" runs those quickstarts only.)
#
# Each method's quickstart (configs/quickstart/NAME.yaml: a ResNet-18 on Fashion-MNIST, sized
# for a 2-core CPU, with the ImageNet stem at 32 px; SimCLR's, SwAV's, MoCo's, DeepClusterV2's and
# Jigsaw's with the small-image stem at 28 px;
# each judged against its own trunk at random init; swav_regnet: SwAV on a RegNetY-400MF, judged
# on its avgpool against the RegNet at random init; rotnet_alexnet: RotNet on alexnet_rotnet at 96 px, judged on pool5 and
# conv5 against the AlexNet at random init) is pre-trained for the same budget, EPOCHS epochs (default 4) over its
# quickstart's images, with `selfsup run` (ClusterFit: `selfsup clusterfit` of the RotNet
# trunk, then EPOCHS epochs on its cluster labels); then the features of its trunk (res4 pooled 2x2 and
# res5avg, eval mode, train and test splits) are extracted and judged by VISSL's kNN benchmark
# (k = 20, sigma 0.1), as `make demo` judges SimCLR. The same trunk at random initialisation is
# the baseline. One table: method, kNN top-1 on res5avg and res4, the lead over random init, the
# pre-training time. Not part of `make demo` (80 minutes for the nine ResNet-18 methods at 4
# epochs on 2 cores); the README shows its table. Everything goes to runs/methods-DATE-TIME.
set -euo pipefail
build=${1:-build}
epochs=${2:-4}
cd "$(dirname "$0")/.."
selfsup="$build/selfsup"
methods=(${METHODS:-simclr swav moco npid pirl deepclusterv2 rotnet clusterfit jigsaw swav_regnet rotnet_alexnet})
[[ -f data/fashion-mnist/disk_filelist/train_images.npy ]] || "$selfsup" dataset fashion-mnist data/fashion-mnist
run="runs/methods-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run"

# A RegNet quickstart's trunk for the extraction (quickstart/swav_regnet's: regnet_y_400mf's
# parameters with the CIFAR stem), read at res4 pooled 2x2 and avgpool, the RegNet's res5avg.
REGNET_TRUNK=(config.MODEL.TRUNK.NAME=regnet config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.depth=16
    config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.w_0=48 config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.w_a=27.89
    config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.w_m=2.09 config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.group_width=8
    config.MODEL.TRUNK.TRUNK_PARAMS.REGNET.stem_type=res_stem_cifar
    'config.MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP=[["res4",["AdaptiveAvgPool2d",[[2,2]]]],["avgpool",["Identity",[]]]]')
is_regnet() { [[ $1 == *regnet* ]]; }

# images_at SIZE: the evaluation's transforms, the images resized to SIZE px.
images_at() {
    printf '[{"name":"Resize","size":%d},{"name":"ToTensor"},{"name":"Normalize","mean":[0.286,0.286,0.286],"std":[0.353,0.353,0.353]}]' "$1"
}

# The AlexNet quickstart's trunk (quickstart/rotnet_alexnet: alexnet_rotnet on 96 px images), read
# at conv5 pooled 2x2 and at pool5 (256 x 2 x 2 at 96 px), in place of res4 and res5avg.
ALEXNET_IMAGES=$(images_at 96)
ALEXNET_TRUNK=(config.MODEL.TRUNK.NAME=alexnet_rotnet "config.DATA.TRAIN.TRANSFORMS=$ALEXNET_IMAGES"
    "config.DATA.TEST.TRANSFORMS=$ALEXNET_IMAGES"
    'config.MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP=[["conv5",["AdaptiveAvgPool2d",[[2,2]]]],["pool5",["Identity",[]]]]')
is_alexnet() { [[ $1 == *alexnet* ]]; }

# quickstart/extract_features reads the small-image stem at the images' own 28 px (SimCLR's,
# SwAV's, MoCo's, DeepClusterV2's and Jigsaw's trunk); the ResNet-18 quickstarts on the ImageNet
# stem are read at 32 px.
RESNET32_IMAGES=$(images_at 32)
RESNET32_TRUNK=(config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.SMALL_STEM=False "config.DATA.TRAIN.TRANSFORMS=$RESNET32_IMAGES"
    "config.DATA.TEST.TRANSFORMS=$RESNET32_IMAGES")
has_small_stem() {
    local cfg=$1
    [[ $cfg == clusterfit ]] && cfg=clusterfit_train
    [[ $("$selfsup" config show "quickstart/$cfg" --key config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.SMALL_STEM 2>/dev/null) == true ]]
}
declare -A small_stem=()
for m in "${methods[@]}"; do
    if ! is_regnet "$m" && ! is_alexnet "$m" && has_small_stem "$m"; then small_stem[$m]=1; fi
done

# evaluate NAME WEIGHTS [overrides...]: extract with the quickstart's evaluation config, then kNN.
evaluate() {
    local out="$run/$1" weights=$2
    shift 2
    "$selfsup" run quickstart/extract_features --run-dir "$out/extract" \
        config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$weights" config.CHECKPOINT.DIR="$out/features" "$@" >/dev/null 2>&1 ||
        { echo "  $1: extraction failed: see $out/extract/logs" >&2; exit 1; }
    "$build/selfsup-knn" -c quickstart/eval_knn config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$weights" \
        --features "$out/features" --output "$out/knn.json" > "$out/knn.txt" 2>&1 ||
        { echo "  $1: kNN failed: see $out/knn.txt" >&2; exit 1; }
}

# pretrain NAME: EPOCHS epochs of quickstart/NAME into $run/NAME/checkpoints.
pretrain() {
    "$selfsup" run "quickstart/$1" --run-dir "$run/$1/pretrain" config.OPTIMIZER.num_epochs="$epochs" \
        ${LIMIT:+config.DATA.TRAIN.DATA_LIMIT=$LIMIT} config.TEST_MODEL=False config.LOG_FREQUENCY=100 config.CHECKPOINT.DIR="$run/$1/checkpoints" >/dev/null 2>&1 ||
        { echo "  $1: pre-training failed: see $run/$1/pretrain/logs" >&2; exit 1; }
}

# ClusterFit as VISSL's recipe has it: the RotNet trunk of this run (trained first if RotNet is
# not in METHODS) clustered into quickstart/clusterfit's 100 groups, then EPOCHS epochs of
# quickstart/clusterfit_train on those labels. Its time is the clustering's and the training's.
pretrain_clusterfit() {
    [[ -f $run/rotnet/checkpoints/checkpoint.torch ]] || { echo "  (RotNet first: ClusterFit clusters its features)"; pretrain rotnet; }
    "$selfsup" clusterfit quickstart/clusterfit --run-dir "$run/clusterfit/extract" --quiet \
        config.MODEL.WEIGHTS_INIT.PARAMS_FILE="$run/rotnet/checkpoints/checkpoint.torch" config.CHECKPOINT.DIR="$run/clusterfit/labels" \
        ${LIMIT:+config.DATA.TRAIN.DATA_LIMIT=$LIMIT} \
        --then quickstart/clusterfit_train --run-dir "$run/clusterfit/pretrain" config.OPTIMIZER.num_epochs="$epochs" \
        ${LIMIT:+config.DATA.TRAIN.DATA_LIMIT=$LIMIT} config.LOG_FREQUENCY=100 config.CHECKPOINT.DIR="$run/clusterfit/checkpoints" >"$run/clusterfit.log" 2>&1 ||
        { echo "  clusterfit failed: see $run/clusterfit.log" >&2; exit 1; }
}

for m in "${methods[@]}"; do
    printf '== %s: %s epochs of quickstart/%s\n' "$m" "$epochs" "$m"
    mkdir -p "$run/$m"
    t0=$SECONDS
    if [[ $m == clusterfit ]]; then pretrain_clusterfit; else pretrain "$m"; fi
    echo $((SECONDS - t0)) > "$run/$m/seconds"
    grep -h 'iter:' "$run/$m/pretrain/logs/train.0.log" | sed -n '1p;$p' | cut -d' ' -f5- | sed 's/^/  /'
    if is_regnet "$m"; then
        evaluate "$m" "$run/$m/checkpoints/checkpoint.torch" "${REGNET_TRUNK[@]}"
    elif is_alexnet "$m"; then
        evaluate "$m" "$run/$m/checkpoints/checkpoint.torch" "${ALEXNET_TRUNK[@]}"
    elif [[ -v small_stem[$m] ]]; then
        evaluate "$m" "$run/$m/checkpoints/checkpoint.torch"
    else
        evaluate "$m" "$run/$m/checkpoints/checkpoint.torch" "${RESNET32_TRUNK[@]}"
    fi
done
echo "== random init"
evaluate random "" "${RESNET32_TRUNK[@]}"
((${#small_stem[@]})) && evaluate random_small ""
if printf '%s\n' "${methods[@]}" | grep -q regnet; then evaluate random_regnet "" "${REGNET_TRUNK[@]}"; fi
if printf '%s\n' "${methods[@]}" | grep -q alexnet; then evaluate random_alexnet "" "${ALEXNET_TRUNK[@]}"; fi

SMALL_STEM="${!small_stem[*]}" /usr/bin/python3 - "$run" "$epochs" "${methods[@]}" <<'PY'
import json, os, sys
run, epochs, methods = sys.argv[1], sys.argv[2], sys.argv[3:]
small = os.environ["SMALL_STEM"].split()
top1 = lambda name, layer: json.load(open(f"{run}/{name}/knn.json"))["layers"][layer]["top1"]
# A RegNet's pooled last stage is avgpool (VISSL's name), an AlexNet's pool5 and conv5 stand for
# res5avg and res4; each is judged against the same trunk at random init (a small-stem ResNet
# against the small-stem ResNet).
kind = lambda name: "regnet" if "regnet" in name else "alexnet" if "alexnet" in name else "small" if name in small else ""
last = lambda name: {"regnet": "avgpool", "alexnet": "pool5"}.get(kind(name), "res5avg")
mid = lambda name: "conv5" if kind(name) == "alexnet" else "res4"
base = lambda m: f"random_{kind(m)}" if kind(m) else "random"
base5, base4 = top1("random", "res5avg"), top1("random", "res4")
print(f"\nkNN top-1 on the Fashion-MNIST test split (10,000 images) after {epochs} epochs of each quickstart:\n")
print("| method | res5avg | vs random | res4 | vs random | pre-training |")
print("|---|--:|--:|--:|--:|--:|")
for m in methods:
    s = int(open(f"{run}/{m}/seconds").read())
    r5, r4 = top1(m, last(m)), top1(m, mid(m))
    b5, b4 = top1(base(m), last(m)), top1(base(m), mid(m))
    print(f"| {m} | {r5:.2f} | {r5 - b5:+.2f} | {r4:.2f} | {r4 - b4:+.2f} | {s} s |")
print(f"| random init | {base5:.2f} | | {base4:.2f} | | |")
if small:
    print(f"| random init (the small stem, 28 px) | {top1('random_small', 'res5avg'):.2f} | | "
          f"{top1('random_small', 'res4'):.2f} | | |")
if any("regnet" in m for m in methods):
    print(f"| random init (the RegNet; avgpool) | {top1('random_regnet', 'avgpool'):.2f} | | "
          f"{top1('random_regnet', 'res4'):.2f} | | |")
if any("alexnet" in m for m in methods):
    print(f"| random init (the AlexNet; pool5, conv5) | {top1('random_alexnet', 'pool5'):.2f} | | "
          f"{top1('random_alexnet', 'conv5'):.2f} | | |")
print(f"\neverything is in {run}")
PY
