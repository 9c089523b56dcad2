#!/usr/bin/env bash
# bench/train.sh BUILD_DIR [N] — end-to-end SimCLR training on the CPU: `selfsup run` of the
# SimCLR quickstart (decode → 2 augment workers → collate → train, ResNet-18 with the small-image
# stem + VISSL's heads, the quickstart's batch of 28 px Fashion-MNIST crops) beside the same
# recipe the PyTorch/VISSL way (bench/train_bench.py: a DataLoader with 2 workers, torchvision
# transforms, torch on the same threads), one epoch over the first N images (default 2560)
# each, in one run.
#
# Reports images/s (batch / median step time, after the first 5 steps) and the share of the
# step spent waiting for data. Both sides share this machine's cores between their data
# workers and their compute, as they would on a training node. Prints the BLAS each side used
# (bench/peers.sh installs OpenBLAS for torch when missing).
set -euo pipefail
build=${1:-build}
n=${2:-2560}
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install
python=/usr/bin/python3
list=data/fashion-mnist/disk_filelist/train_images.npy
[[ -f $list ]] || "$build/selfsup" dataset fashion-mnist data/fashion-mnist >&2
threads=$(nproc)
work=$(mktemp -d)
batch=$("$build/selfsup" config show quickstart/simclr --key config.DATA.TRAIN.BATCHSIZE_PER_REPLICA)
trap 'rm -rf "$work"' EXIT

"$build/selfsup" run quickstart/simclr --run-dir "$work/run" config.DATA.TRAIN.DATA_LIMIT="$n" \
    config.OPTIMIZER.num_epochs=1 config.LOG_FREQUENCY=1 config.CHECKPOINT.DIR="$work/ckpt" \
    config.CHECKPOINT.AUTO_RESUME=False >/dev/null 2>&1
# stdout.json: one line per iteration with btime(ms) and data_wait(ms); skip the first 5.
ours=$("$python" - "$work/ckpt/stdout.json" "$batch" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]
bt = [r["btime(ms)"] for r in rows]
print(f"{int(sys.argv[2]) / (statistics.median(bt) / 1e3):.1f} {sum(r['data_wait(ms)'] for r in rows) / sum(bt):.3f} {len(rows) + 5}")
# mean ms per step: data wait, forward, loss, backward, optimizer (read_sample: the input's
# normalisation and upload, counted with the forward as PyTorch's side does it in the model)
mean = lambda k: sum(r[k] for r in rows) / len(rows)
print(f"{mean('data_wait(ms)'):.1f} {mean('read_sample(ms)') + mean('forward(ms)'):.1f} {mean('loss_compute(ms)'):.1f} "
      f"{mean('backward(ms)'):.1f} {mean('optimizer_step(ms)') + mean('meters_update(ms)'):.1f}")
PY
)
out=$("$python" bench/train_bench.py --filelist "$list" --n "$n" --workers 2 --threads "$threads" | grep -v '^#')
theirs=$(grep '^torch_train' <<<"$out")
read -r a aw steps <<<"$(head -1 <<<"$ours")"
read -r _ b bw _ <<<"$theirs"
read -r ow of ol ob oo <<<"$(tail -1 <<<"$ours")"
read -r _ tw tf tl tb to <<<"$(grep '^torch_breakdown' <<<"$out")"
echo "## train: SimCLR quickstart end to end on the CPU, selfsup vs PyTorch $("$python" -c 'import torch; print(torch.__version__)')"
echo
echo "Machine: $(nproc) cores, $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $n images, $steps steps of $batch; $(date -u '+%Y-%m-%d %H:%M UTC')."
selfsup_blas_line "$(onednn_version): its convolutions and dnnl_sgemm (own JIT kernels, no system BLAS)."
peers_blas_line torch torchvision
echo
echo "| side | images/s | data wait (share of the step) |"
echo "|---|--:|--:|"
printf '| selfsup | %.1f | %.1f%% |\n' "$a" "$(echo "$aw * 100" | bc -l)"
printf '| PyTorch (DataLoader, 2 workers) | %.1f | %.1f%% |\n' "$b" "$(echo "$bw * 100" | bc -l)"
printf '| ratio | %.2f | |\n' "$(echo "$a / $b" | bc -l)"
echo
echo "Where a step's time goes, mean ms per step after the first 5 (selfsup: stdout.json's timers;"
echo "forward includes normalising and uploading the input; PyTorch: timed around each call):"
echo
echo "| side | data wait | forward | loss | backward | optimizer |"
echo "|---|--:|--:|--:|--:|--:|"
echo "| selfsup | $ow | $of | $ol | $ob | $oo |"
echo "| PyTorch | $tw | $tf | $tl | $tb | $to |"
