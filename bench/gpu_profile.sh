#!/usr/bin/env bash
# bench/gpu_profile.sh [OUT] — where the GPU time of selfsup-train's ResNet-50 SimCLR step goes.
#
# Runs bench/gpu_train.sh's step (3 steps) under Nsight Compute with one metric, each kernel's
# duration (gpu__time_duration.sum), skipping the first step's kernels (cuDNN's plans, first
# touches), and sums the durations by kernel name: the table of where a step's time goes, the
# kernels worth a faster path first. Prints the top rows; OUT (a file) gets the whole table.
# Needs ncu (Nsight Compute) on PATH or in /opt/nvidia, and what gpu_train.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
[ -n "$ncu" ] || { echo "gpu_profile: no ncu here"; exit 1; }
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
TRAIN_PREFIX="$ncu --csv --metrics gpu__time_duration.sum --launch-skip ${SKIP:-1500} --launch-count ${COUNT:-1500} \
    --log-file $csv" STEPS=3 WARMUP=1 bench/gpu_train.sh >/dev/null
python3 - "$csv" "$out" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head = rows[0]
name, unit, value = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
total = collections.defaultdict(float)
count = collections.Counter()
scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}
for r in rows[1:]:
    k = r[name].split("(")[0][:90]
    total[k] += float(r[value].replace(",", "")) * scale[r[unit]]
    count[k] += 1
all_ms = sum(total.values())
lines = [f"{len(rows) - 1} kernels, {all_ms:.1f} ms of GPU time"]
for k, ms in sorted(total.items(), key=lambda kv: -kv[1]):
    lines.append(f"{ms:9.2f} ms {100 * ms / all_ms:5.1f}% {count[k]:5d}x  {k}")
print("\n".join(lines[:26]))
if sys.argv[2]:
    open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
