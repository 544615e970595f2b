#!/usr/bin/env bash
# Sets up a Debian 12 machine if needed, builds the programs moetier runs
# with, and generates text through the daemon and a worker (a small
# synthetic model when none is given), then shows the status map and the
# wall time this took.
#   deploy/quickstart.sh [MODEL.gguf] [PROMPT]
# Build folder: build-release/ (MOETIER_QUICKSTART_BUILD_DIR overrides it),
# separate from the test suite's build/, so neither rebuilds the other. CUDA
# code is built only for the GPU this machine has (MOETIER_CUDA_ARCHITECTURES
# overrides the choice; none visible: the CPU worker only).
set -euo pipefail

started=$(date +%s)
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${MOETIER_QUICKSTART_BUILD_DIR:-$repo_root/build-release}
model=${1:-}
prompt=${2:-"The quick brown fox"}

"$repo_root/deploy/setup.sh"

cuda_arch=${MOETIER_CUDA_ARCHITECTURES:-}
if [[ -z "$cuda_arch" ]] && command -v nvidia-smi >/dev/null &&
   cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) &&
   [[ -n "$cap" ]]; then
  cuda_arch=${cap/./}
fi
cuda_flags=(-DMOETIER_ENABLE_CUDA=OFF)
if [[ -n "$cuda_arch" ]]; then
  cuda_flags=(-DMOETIER_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch")
  echo "quickstart: building the CUDA worker for architecture $cuda_arch"
else
  echo "quickstart: no GPU visible; building the CPU worker only"
fi

programs=(moetierd moetier-worker moetier moetier-synth moetier-inspect)
cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMOETIER_BUILD_TESTS=OFF "${cuda_flags[@]}"
cmake --build "$build_dir" -j "$(nproc)" --target "${programs[@]}"
built=$(date +%s)

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

finished=$(date +%s)
echo
echo "quickstart: done in $(((finished - started) / 60)) min $(((finished - started) % 60)) s" \
     "(build $((built - started)) s, model and generation $((finished - built)) s)."
echo "quickstart: the programs are in $build_dir; try: $build_dir/client/moetier run --help"
