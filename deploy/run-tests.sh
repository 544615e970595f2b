#!/usr/bin/env bash
# Sets up a Debian 12 machine if needed, builds moetier and runs the whole test
# suite with ctest. Build folder: build/ (override with MOETIER_BUILD_DIR),
# separate from deploy/quickstart.sh's build-release/.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MOETIER_BUILD_DIR:-$repo_root/build}
jobs=${MOETIER_JOBS:-$(nproc)}

"$repo_root/deploy/setup.sh" --tests

# Tests need CUDA code for the GPU they run on only: that GPU's architecture
# when one is visible, else 90 (keeps builds on GPU-less machines short).
cuda_arch=${MOETIER_CUDA_ARCHITECTURES:-}
if [[ -z "$cuda_arch" ]]; then
  cuda_arch=90
  if command -v nvidia-smi >/dev/null && cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) && [[ -n "$cap" ]]; then
    cuda_arch=${cap/./}
  fi
fi

cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch"
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 600
