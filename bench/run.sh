#!/usr/bin/env bash
# bench/run.sh BUILD_DIR [SIZE...] — selfsup's speed beside the reference way, in one run.
#
# Runs each benchmark script in turn and prints their Markdown tables:
#   bench/npy.sh BUILD_DIR [SIZE...]  lib/npy against numpy (SIZEs: see bench/npy.sh --help)
#   bench/ring.sh BUILD_DIR           shm/ring against one core's memcpy and a pipe
#   bench/trunks.sh BUILD_DIR         the model engine against PyTorch
#   bench/data.sh BUILD_DIR           decode + augment + collate against PIL + torchvision
#   bench/knn.sh BUILD_DIR            selfsup-knn against VISSL's kNN in torch and FAISS
#   bench/svm.sh BUILD_DIR            selfsup-svm against VISSL's SVMTrainer on sklearn
#   bench/ddp.sh BUILD_DIR            the shm collectives' all-reduce against memcpy
#   bench/retrieval.sh BUILD_DIR      selfsup-retrieval against VISSL's retrieval flow in torch
# First installs the reference side's OpenBLAS, FAISS and threadpoolctl from Debian when
# missing (bench/peers.sh; BENCH_PEERS_INSTALL=0 skips it); each benchmark prints the BLAS each
# side used. Exits non-zero when any of them fails. See bench/README.md.
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
build=${1:-build}
shift || true
cd "$(dirname "$0")/.."
source bench/peers.sh
peers_install

./bench/npy.sh "$build" "$@"
echo
./bench/ring.sh "$build"
echo
./bench/trunks.sh "$build"
echo
./bench/data.sh "$build"
echo
./bench/knn.sh "$build"
echo
./bench/svm.sh "$build"
echo
./bench/ddp.sh "$build"
echo
./bench/retrieval.sh "$build"
