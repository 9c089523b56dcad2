#!/usr/bin/env bash
# tests/gpu/bundle.sh BUILD OUT — `make gpu-bundle`: what a GPU machine needs to run the runbook.
#
# A GPU machine here has the NVIDIA driver, CUDA 13 and PyTorch (whose Python packages carry
# cuDNN, cuBLAS and NCCL), but none of the Debian libraries our binaries link and no package
# registry. So the bundle holds:
#   bin/   every selfsup binary, the backend conformance test and the NCCL world's, the tests'
#          passthru stage (bench/gpu_train.sh feeds the trainer a ring with it) and the decode
#          farm's wire benchmark (bench/farm.sh runs there on 16 cores) (built here, with nvcc), without their debug sections (the symbols stay, for backtraces): DWARF
#          would double the bundle and, on a sanitizer build, push it past the limit;
#   lib/   the shared libraries they need from this machine, found with ldd, except the C
#          library family (the GPU machine's own is newer, and ours would fight its libstdc++)
#          and the CUDA libraries (the machine's cuDNN/cuBLAS; cudart is linked in statically);
#   data/  the records the end-to-end runs train on: 2 epochs of 5 batches (20) of the SimCLR and
#          SwAV quickstarts and 5 of the extraction quickstart, made here by decode | augment |
#          collate on Fashion-MNIST, and the first 320 entries of its file lists (the trainer
#          counts its steps from them); and photos/, 128 JPEGs of ImageNet's sizes
#          (bench/make-photo-corpus, about 5 MB) that bench/gpu_pipeline.sh and bench/farm.sh
#          decode.
# tests/gpu/env.sh, run there, points the loader at lib/ and at the machine's CUDA libraries.
# BUNDLE_DATA=0 leaves data/ empty (the unit test of the bundle).
# The result is one xz-compressed tar under 40 MB, which the device tool carries with the checkout.
set -euo pipefail
build=${1:-build}
out=${2:-$build/selfsup-gpu.tar.xz}
cd "$(dirname "$0")/../.."
top=$(mktemp -d)
trap 'rm -rf "$top"' EXIT
stage="$top/selfsup-gpu"
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"

bins=()
for f in "$build"/selfsup "$build"/selfsup-* "$build"/tests/backend-ops "$build"/tests/nccl-world \
    "$build"/tests/selfsup-test-passthru "$build"/bench/farm_bench; do
    [[ -f $f && -x $f ]] && bins+=("$f") # not the bundle itself (selfsup-gpu.tar.xz)
done
cp "${bins[@]}" "$stage/bin/"
strip --strip-debug "$stage"/bin/*

# Libraries the GPU machine has its own of (newer) or must supply (CUDA, the driver).
system='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|'
system+='libstdc\+\+|libgcc_s|libcuda\.so|libcudnn|libcublas|libcudart|libnccl|libnvrtc|libnvJitLink)'
ldd "${bins[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        [[ $name =~ $system ]] || cp -L "$path" "$stage/lib/$name"
    done

# records CONFIG EPOCHS FILE [overrides...]: the first 320 images through decode | augment | collate.
records() {
    local o=(config.DATA.TRAIN.DATA_LIMIT=320 "${@:4}")
    "$build/selfsup-decode" -c "quickstart/$1" --epochs "$2" "${o[@]}" 2>/dev/null |
        "$build/selfsup-augment" -c "quickstart/$1" "${o[@]}" 2>/dev/null |
        "$build/selfsup-collate" -c "quickstart/$1" "${o[@]}" 2>/dev/null > "$3"
}

# What the end-to-end runs read: 2 epochs of 5 batches (SimCLR's: 20 of 16) of SimCLR, SwAV
# (also SwAV on a RegNet and on an EfficientNet), RotNet on an AlexNet, MoCo, NPID and
# DeepClusterV2 (and its epoch 0 again: the memory pass), the first epoch
# alone (a run that stops after it, to resume from its checkpoint), 5 batches of the
# extraction quickstart's evaluation crops, and the first 320 entries of the file lists (the
# trainer counts its steps from them).
add_data() {
    [ -d data/fashion-mnist ] || "$build/selfsup" dataset fashion-mnist data/fashion-mnist >/dev/null
    mkdir -p "$stage/data/fashion-mnist/disk_filelist"
    for f in train_images train_labels val_images val_labels; do
        /usr/bin/python3 -c 'import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[:320])' \
            "data/fashion-mnist/disk_filelist/$f.npy" "$stage/data/fashion-mnist/disk_filelist/$f.npy"
    done
    records simclr 2 "$stage/data/simclr.rec" config.OPTIMIZER.num_epochs=2
    records simclr 1 "$stage/data/simclr_e0.rec" config.OPTIMIZER.num_epochs=2
    records swav 2 "$stage/data/swav.rec" config.OPTIMIZER.num_epochs=2
    cp "$stage/data/swav.rec" "$stage/data/swav_regnet.rec" # the same crops: only the trunk differs
    cp "$stage/data/swav.rec" "$stage/data/swav_efficientnet.rec"
    records rotnet_alexnet 2 "$stage/data/rotnet_alexnet.rec" config.OPTIMIZER.num_epochs=2
    records moco 2 "$stage/data/moco.rec" config.OPTIMIZER.num_epochs=2
    records npid 2 "$stage/data/npid.rec" config.OPTIMIZER.num_epochs=2
    records deepclusterv2 2 "$stage/data/deepclusterv2.rec" config.OPTIMIZER.num_epochs=2
    records deepclusterv2 1 "$stage/data/deepclusterv2_e0.rec" config.OPTIMIZER.num_epochs=2
    records extract_features 1 "$stage/data/extract.rec" "config.MODEL.WEIGHTS_INIT.PARAMS_FILE=''"
    ./bench/make-photo-corpus --classes 8 128 "$stage/data/photos" >/dev/null
}
[ "${BUNDLE_DATA:-1}" = 1 ] && add_data

tar -C "$top" -cf - selfsup-gpu | xz -T0 -6 > "$out"
size=$(stat -c %s "$out")
echo "gpu-bundle: $out, $((size / 1048576)) MiB ($(ls "$stage/bin" | wc -l) binaries, $(ls "$stage/lib" | wc -l) libraries)"
if [ "$size" -gt $((40 * 1048576)) ]; then
    echo "gpu-bundle: over 40 MiB: too big to travel with the checkout" >&2
    exit 1
fi
