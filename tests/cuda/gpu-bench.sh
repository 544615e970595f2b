#!/usr/bin/env bash
# The whole GPU check in one go, on a machine with an NVIDIA GPU:
#   1. build for this GPU and run the CUDA tests (tests/cuda/run-on-gpu.sh)
#   2. write the full-size synthetic Qwen3-30B-A3B model, Q4_K_M mix (about
#      17 GB; skipped with --model FILE)
#   3. moetier-bench-cuda: every expert resident, against the memory roofline
#   4. moetier-bench-cache --device cuda:0: every expert resident, the expert
#      cache at 100%, 50%, 25% and 12.5% of the experts' bytes, misses on the
#      CPU at 25%, static placement of half and of all layers' experts on the
#      CPU (llama.cpp's --n-cpu-moe), with the pinned-copy rate of the same run
#
# usage: tests/cuda/gpu-bench.sh [--build DIR] [--model FILE] [--out DIR]
#                                [--layers N] [--decode-tokens N] [--prompt-tokens N]
#                                [--runs N] [--skip-tests]
# --layers N writes a shorter model of the same shapes (a quicker check; the
# figures are then not the full model's). Logs and JSON go to --out (default
# $OUT when set, else gpu-bench-out). Exits non-zero if a step fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-gpu"
model=""
out="${OUT:-$root/gpu-bench-out}"
layers=""
decode=128
prompt=512
runs=3
skip_tests=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --decode-tokens) decode="$2"; shift 2 ;;
    --prompt-tokens) prompt="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --skip-tests) skip_tests=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
start=$SECONDS
step() { printf '\n=== %s (at %d s)\n' "$1" $((SECONDS - start)); }

step "build and CUDA tests"
tests_status=0
if [[ $skip_tests == 0 ]]; then
  set +o pipefail; "$root/tests/cuda/run-on-gpu.sh" "$build" 2>&1 | tee "$out/cuda-tests.log"; tests_status=${PIPESTATUS[0]}; set -o pipefail
else
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
fi
ninja -C "$build" moetier-synth moetier-bench-cuda moetier-bench-cache >/dev/null
for f in "$build"/*.log; do cp "$f" "$out/" 2>/dev/null || true; done

if [[ -z "$model" ]]; then
  step "synthetic model"
  model="$build/full-q4_k_m${layers:+-$layers-layers}.gguf"
  if [[ ! -s "$model" ]]; then
    "$build/tools/synth/moetier-synth" --preset full --quant q4_k_m ${layers:+--layers "$layers"} \
      --threads "$(nproc)" --out "$model" 2>&1 | tail -1
  fi
fi
ls -la "$model"

step "moetier-bench-cuda (every expert resident)"
"$build/worker/bench/moetier-bench-cuda" --model "$model" --runs "$runs" \
  --decode-tokens "$decode" --prompt-tokens "$prompt" --batch "$prompt" 2>&1 |
  tee "$out/bench-cuda.log"

step "moetier-bench-cache --device cuda:0"
"$build/tools/bench_cache/moetier-bench-cache" --model "$model" --device cuda:0 \
  --runs "$runs" --decode-tokens "$decode" --prompt-tokens "$prompt" \
  --json "$out/bench-cache.json" 2>&1 | tee "$out/bench-cache.log"

step "done"
echo "logs and JSON in $out"
[[ $tests_status == 0 ]] || { echo "some CUDA tests failed: see $out/cuda-tests.log" >&2; exit 1; }
