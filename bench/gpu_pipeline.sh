#!/usr/bin/env bash
# bench/gpu_pipeline.sh [JSON] [overrides...] — the GPU trainer fed by the real data path, for
# the runbook: does decode → augment → collate on the machine's cores keep the GPU busy?
#
# `selfsup run` of VISSL's SimCLR recipe (configs/pretrain/simclr/simclr_8node_resnet.yaml:
# ResNet-50, 2 × 224 px crops with colour distortion and blur, the 2048-2048-128 head, LARC) on
# one GPU in mixed precision, BATCH images (128) a step, on the bundle's photo corpus (PHOTOS,
# default data/photos: JPEGs of ImageNet's sizes and compression, bench/make-photo-corpus)
# listed REPEAT times (40) so an epoch is long enough to measure; the files stay in the page
# cache, so what is timed is decoding and augmenting, not a disk. WORKERS augment processes
# (default: the cores less three, for decode, collate and the trainer). The trainer's log lines
# say how long each step waited for its batch (data_wait) and how long it took (btime); after
# WARMUP steps (5) their means give images/s and the share of the step spent waiting (issue
# 21's target: under 5%). Prints one line and, with JSON, writes the figures there. Needs the
# bundle's binaries on PATH and python3 with numpy; more overrides go to `selfsup run` (the
# test of this script on a machine without a GPU passes config.MACHINE.DEVICE=cpu and smaller
# sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-}
shift $(($# > 0 ? 1 : 0))
photos=$(realpath "${PHOTOS:-data/photos}")
repeat=${REPEAT:-40} batch=${BATCH:-128} warmup=${WARMUP:-5}
workers=${WORKERS:-$(($(nproc) > 4 ? $(nproc) - 3 : 1))}
[ -d "$photos/train" ] || { echo "gpu_pipeline: no photo corpus at $photos (make gpu-bundle puts one in data/photos)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The file list: every photo, REPEAT times over (labels unused: SimCLR's are sample indices).
python3 - "$photos" "$repeat" "$work" <<'PY'
import glob, sys
import numpy as np
files = sorted(glob.glob(sys.argv[1] + "/train/*/*.JPEG"))
paths = np.array(files * int(sys.argv[2]))
np.save(sys.argv[3] + "/train_images.npy", paths)
np.save(sys.argv[3] + "/train_labels.npy", np.zeros(len(paths), np.int64))
PY

selfsup run pretrain/simclr/simclr_8node_resnet --run-dir "$work/run" \
    config.DISTRIBUTED.NUM_NODES=1 config.DISTRIBUTED.NUM_PROC_PER_NODE=1 \
    config.MACHINE.DEVICE=gpu config.MODEL.AMP_PARAMS.USE_AMP=True config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN=False \
    "config.DATA.TRAIN.DATA_SOURCES=[disk_filelist]" "config.DATA.TRAIN.DATA_PATHS=[$work/train_images.npy]" \
    "config.DATA.TRAIN.LABEL_SOURCES=[disk_filelist]" "config.DATA.TRAIN.LABEL_PATHS=[$work/train_labels.npy]" \
    config.DATA.TRAIN.BATCHSIZE_PER_REPLICA="$batch" config.DATA.NUM_DATALOADER_WORKERS="$workers" \
    config.OPTIMIZER.num_epochs=1 config.LOG_FREQUENCY=1 config.CHECKPOINT.DIR="$work/ckpt" \
    config.CHECKPOINT.CHECKPOINT_FREQUENCY=100 "$@" > "$work/run.log" 2>&1 ||
    { tail -n 30 "$work/run.log"; exit 1; }

python3 - "$work/ckpt/stdout.json" "$warmup" "$batch" "$workers" "$json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
warmup, batch, workers, out = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
timed = [l for l in lines if l["iter"] > warmup]
if not timed:
    sys.exit(f"gpu_pipeline: {len(lines)} steps, none after the {warmup} of warm-up (raise REPEAT)")
step = sum(l["btime(ms)"] for l in timed) / len(timed)
wait = sum(l["data_wait(ms)"] for l in timed) / len(timed)
r = {"images_per_s": batch / (step / 1e3), "ms_per_step": step, "data_wait_ms": wait, "data_wait_share": wait / step,
     "steps": len(timed), "batch": batch, "workers": workers, "peak_mem_mb": max(l["peak_mem(M)"] for l in lines)}
print(f"selfsup run, decode + {workers} augment workers + collate feeding the trainer: {r['images_per_s']:.1f} "
      f"images/s, {step:.1f} ms/step, of which {wait:.1f} ms waiting for data ({100 * r['data_wait_share']:.1f}%), "
      f"over {len(timed)} steps")
if out:
    json.dump(r, open(out, "w"), indent=1)
PY
