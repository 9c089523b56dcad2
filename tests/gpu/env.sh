# tests/gpu/env.sh DIR — sourced by the runbook: run the unpacked bundle DIR on this machine.
#
# The loader looks in the bundle's lib/ first (the Debian libraries the binaries were built
# against), then in the CUDA libraries this machine has: the ones PyTorch's Python packages
# carry (nvidia/*/lib under site-packages: cuDNN, cuBLAS, NCCL), then a CUDA toolkit's.
bundle_dir=$1
cuda_lib_dirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")])
dirs = set()
for root in roots:
    for lib in glob.glob(os.path.join(root, "nvidia", "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))
PY
)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cuda_lib_dirs="$cuda_lib_dirs:$d"
done
export LD_LIBRARY_PATH="$bundle_dir/lib:$cuda_lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bundle_dir/bin:$PATH"
