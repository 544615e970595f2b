#!/usr/bin/env bash
# Sets up a Debian 12 machine if needed, builds moetier, and generates text
# through the daemon and a worker (a small synthetic model when none is
# given), then shows the status map.
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

# A real generation through the daemon and a CPU worker, then the status map:
# `moetier run` starts a private moetierd, waits until it serves, generates,
# prints the map and stops it. Without a model it writes a small synthetic
# one once (to ~/.cache/moetier) and reuses it.
run_args=()
if [[ -n "$model" ]]; then
  echo
  "$build_dir/tools/inspect/moetier-inspect" "$model"
  run_args+=(--model "$model")
fi
echo
echo "quickstart: generating 32 tokens through moetierd (random weights make random text)"
"$build_dir/client/moetier" run "${run_args[@]}" -- --max-new-tokens 32 --prompt "$prompt"
