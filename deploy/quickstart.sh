#!/usr/bin/env bash
# Sets up a Debian 12 machine if needed, builds moetier, makes a small
# synthetic model when none is given, and generates text with it.
#   deploy/quickstart.sh [MODEL.gguf] [PROMPT]
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MOETIER_BUILD_DIR:-$repo_root/build}
model=${1:-}
prompt=${2:-"The quick brown fox"}

"$repo_root/deploy/setup.sh"

cuda_arch=${MOETIER_CUDA_ARCHITECTURES:-}
if [[ -z "$cuda_arch" ]] && command -v nvidia-smi >/dev/null && cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) && [[ -n "$cap" ]]; then
  cuda_arch=${cap/./}
fi
cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      ${cuda_arch:+-DCMAKE_CUDA_ARCHITECTURES="$cuda_arch"}
cmake --build "$build_dir" -j "$(nproc)"

if [[ -z "$model" ]]; then
  model="$build_dir/models/synthetic-small-q4_k_m.gguf"
  if [[ ! -f "$model" ]]; then
    mkdir -p "$(dirname "$model")"
    echo "quickstart: no model given; writing a small synthetic one to $model"
    "$build_dir/tools/synth/moetier-synth" --preset small --quant q4_k_m --seed 1 --out "$model"
  fi
fi

echo
"$build_dir/tools/inspect/moetier-inspect" "$model"
echo
echo "quickstart: generating 32 tokens (random weights make random text)"
"$build_dir/worker/moetier-worker" --standalone --model "$model" --prompt "$prompt" -n 32
echo
