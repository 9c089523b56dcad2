#!/usr/bin/env bash
# bench/gpu_train.sh [JSON] — selfsup-train's ResNet-50 SimCLR step on the GPU, for the runbook.
#
# The step the PyTorch peer (bench/gpu_train_torch.py) times on the same card: ResNet-50 (the
# ImageNet stem, not the quickstart's small one) at SIZE px (224), 2 views of BATCH images (128)
# per step, VISSL's SimCLR head (2048-2048-128) and info-NCE loss at temperature 0.1, SGD + LARC
# at lr 0.3. The batches are random uint8 images written once into a records file in memory
# (/dev/shm), so the figure is the training step, not the data path; they reach the trainer
# through a shm ring (selfsup-test-passthru replays the file into it, on a core of its own), as
# collate's batches do, so the trainer copies each batch to the GPU from its pinned ring memory
# (eng_pin_host) while the step before still computes. selfsup-train logs every step's time;
# the first WARMUP steps (cuDNN's plans, the first touches of memory) are left out.
# Prints images/s and ms/step and, with JSON, writes them there. AMP=1 turns on mixed precision (MODEL.AMP_PARAMS.USE_AMP: the
# convolutions in bf16), the peer of PyTorch's eager_bf16 mode. Needs the bundle's binaries on
# PATH and python3 with numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-}
steps=${STEPS:-25} warmup=${WARMUP:-5} batch=${BATCH:-128} size=${SIZE:-224}
if [ "${AMP:-0}" = 1 ]; then amp=True precision=bf16; else amp=False precision=fp32; fi
work=$(mktemp -d /dev/shm/selfsup-bench.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$work"' EXIT

# The records: `steps` batches of 2×batch random crops, in the collator's layout.
python3 - "$work/batches.rec" "$steps" "$batch" "$size" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tools")
import selfsup_records as rec

path, steps, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
idx = np.tile(np.arange(batch, dtype=np.int64), 2)
norm = np.array([[255, 255, 255], [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]], np.float32)
with open(path, "wb") as f:
    for s in range(steps):
        data = rng.integers(0, 256, (2 * batch, size, size, 3), dtype=np.uint8)
        rec.write_record(f, {"data.0": data, "label.0": idx + s * batch, "data_valid.0": np.ones(2 * batch, np.int64),
                             "data_idx.0": idx + s * batch, "normalize": norm}, seq=s)
    rec.write_eos(f, steps)
PY

mkdir -p "$work/data/fashion-mnist/disk_filelist"
python3 - "$work/data/fashion-mnist/disk_filelist" "$((steps * batch))" <<'PY'
import sys
import numpy as np
n = int(sys.argv[2])
np.save(sys.argv[1] + "/train_images.npy", np.array(["img%06d.png" % i for i in range(n)]))
np.save(sys.argv[1] + "/train_labels.npy", np.zeros(n, np.int64))
PY

heads='[["mlp", {"dims": [2048, 2048], "use_relu": True}], ["mlp", {"dims": [2048, 128]}]]'
# Two slots: the replay stays one batch ahead, and with more steps than slots it is still
# writing when the trainer attaches (a producer done before any reader came removes its ring).
ring=selfsup-bench-$$ slot=$((2 * batch * size * size * 3 + (1 << 20)))
selfsup-test-passthru --slot-bytes "$slot" --depth 2 --in "file:$work/batches.rec" --out "shm:$ring" \
    > "$work/replay.log" 2>&1 &
# TRAIN_PREFIX (bench/gpu_profile.sh) runs the trainer under a profiler.
(cd "$work" && ${TRAIN_PREFIX:-} selfsup-train -c quickstart/simclr --in "shm:$ring" \
    config.MACHINE.DEVICE="${DEVICE:-gpu}" config.CHECKPOINT.DIR="$work/ckpt" config.LOG_FREQUENCY=1 \
    config.DATA.TRAIN.DATA_LIMIT=$((steps * batch)) config.DATA.TRAIN.BATCHSIZE_PER_REPLICA="$batch" \
    config.OPTIMIZER.num_epochs=1 config.MODEL.AMP_PARAMS.USE_AMP=$amp \
    config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH=50 config.MODEL.TRUNK.TRUNK_PARAMS.RESNETS.SMALL_STEM=False \
    "config.MODEL.HEAD.PARAMS=$heads" \
    config.LOSS.simclr_info_nce_loss.temperature=0.1 config.CHECKPOINT.CHECKPOINT_FREQUENCY=100) \
    > "$work/train.log" 2>&1 || { tail -n 20 "$work/train.log" "$work/replay.log"; exit 1; }
wait
grep -m1 -o 'the input ring.s memory is not pinned.*' "$work/train.log" || true
grep -m1 -o 'training .* parameters' "$work/train.log"

python3 - "$work/ckpt/stdout.json" "$warmup" "$batch" "$size" "$json" "$precision" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
warmup, batch, size, out, precision = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
ms = sorted(l["btime(ms)"] for l in lines if l["iter"] > warmup)
mean = sum(ms) / len(ms)
r = {"images_per_s": batch / (mean / 1e3), "ms_per_step": mean, "ms_median": ms[len(ms) // 2], "steps": len(ms),
     "precision": precision, "size": size, "batch": batch, "loss_last": lines[-1]["loss"],
     "peak_mem_mb": max(l["peak_mem(M)"] for l in lines), "peak_mem_kind": "selfsup eng_memory_peak"}
print(f"selfsup {precision}: {r['images_per_s']:.1f} images/s, {mean:.1f} ms/step (median {r['ms_median']:.1f}) "
      f"over {len(ms)} steps, peak device memory {r['peak_mem_mb']:.0f} MiB")
if out:
    json.dump(r, open(out, "w"), indent=1)
PY
