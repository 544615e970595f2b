#!/usr/bin/env bash
# Builds and runs the CUDA tests for the GPU this machine has, in one go:
#   tests/cuda/run-on-gpu.sh [build-dir]      (default: build-gpu)
# Fails when a kernel or engine test skips, since on a GPU machine that
# would mean nothing was checked. Also builds moetier-bench-cuda (run it by
# hand on a real model: it is a program, not a test).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-gpu}"
export PATH="/usr/local/cuda/bin:$PATH"

command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: no NVIDIA driver here" >&2; exit 1; }
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')"
[[ "$arch" =~ ^[0-9]+$ ]] || { echo "could not read the GPU's compute capability" >&2; exit 1; }

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
tests=(cuda_device_test cuda_kernels_test cuda_rope_test cuda_kv_cache_test cuda_deltanet_kernels_test
       cuda_delta_rule_chunk_test cuda_engine_test cuda_kv_types_engine_test cuda_cache_engine_test
       cuda_long_context_test cuda_routing_hooks_test cuda_batched_forward_test
       cuda_decode_paths_test cuda_phase_timing_test cuda_gemv_slices_test cuda_expert_rows_test
       cuda_phase_timeline_test cuda_sampling_test cuda_candidate_keys_test)
ninja -C "$build" "${tests[@]}" moetier-bench-cuda

status=0
for t in "${tests[@]}"; do
  log="$build/$t.log"
  if "$build/tests/cuda/$t" --gtest_color=no >"$log" 2>&1; then result=ok; else result=FAILED; status=1; fi
  passed=$(grep -c '^\[       OK \]' "$log" || true)
  # Per-test lines end in "(N ms)"; the summary's repeat of the names does not.
  failed=$(grep -Ec '^\[  FAILED  \] [^ ]+ \([0-9]+ ms\)' "$log" || true)
  skipped=$(grep -Ec '^\[  SKIPPED \] [^ ]+ \([0-9]+ ms\)' "$log" || true)
  printf '%-24s %-6s passed %s, failed %s, skipped %s (log: %s)\n' "$t" "$result" "$passed" "$failed" "$skipped" "$log"
  grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -20 || true
done
# On a GPU the only expected skip is the GPU-less case of cuda_device_test.
if grep -q '^\[  SKIPPED \] CudaKernelsTest\.' "$build/cuda_kernels_test.log" ||
   grep -q '^\[  SKIPPED \] CudaRopeTest\.' "$build/cuda_rope_test.log" ||
   grep -q '^\[  SKIPPED \] CudaKvCacheTest\.' "$build/cuda_kv_cache_test.log" ||
   grep -q '^\[  SKIPPED \] Vectors/CudaKvTypesTest\.' "$build/cuda_kv_types_engine_test.log" ||
   grep -q '^\[  SKIPPED \] Models/CudaLongContextTest\.' "$build/cuda_long_context_test.log" ||
   grep -q '^\[  SKIPPED \] CudaDeltaNetKernelsTest\.' "$build/cuda_deltanet_kernels_test.log" ||
   grep -q '^\[  SKIPPED \] CudaEngineTest\.' "$build/cuda_decode_paths_test.log" ||
   grep -q '^\[  SKIPPED \] CudaPhaseTimingTest\.' "$build/cuda_phase_timing_test.log" ||
   grep -q '^\[  SKIPPED \] CudaSamplingTest\.' "$build/cuda_sampling_test.log"; then
  echo "kernel tests skipped on a machine with a GPU: the device was not usable" >&2
  status=1
fi
# Engine tests: only the cuBLAS cases may skip, and only in a build without
# cuBLAS.
engine_skips="$(grep -E '^\[  SKIPPED \] ([A-Za-z]+/)?Cuda(Engine(Gemm)?|AsFaithfulAsLlamaCpp)Test\.' \
                 "$build/cuda_engine_test.log" | grep -v '/cublas_' | sort -u || true)"
if [[ -n "$engine_skips" ]]; then
  echo "engine tests skipped on a machine with a GPU:" >&2
  echo "$engine_skips" | head -20 >&2
  status=1
fi
# The expert cache tests never skip on a GPU.
cache_skips="$(grep -E '^\[  SKIPPED \] CudaCacheEngineTest\.' "$build/cuda_cache_engine_test.log" |
               sort -u || true)"
if [[ -n "$cache_skips" ]]; then
  echo "expert cache tests skipped on a machine with a GPU:" >&2
  echo "$cache_skips" | head -20 >&2
  status=1
fi
# Nor do the routing hook tests.
hook_skips="$(grep -E '^\[  SKIPPED \] CudaRoutingHooksTest\.' "$build/cuda_routing_hooks_test.log" |
              sort -u || true)"
if [[ -n "$hook_skips" ]]; then
  echo "routing hook tests skipped on a machine with a GPU:" >&2
  echo "$hook_skips" | head -20 >&2
  status=1
fi
# Nor do the batching tests.
batch_skips="$(grep -E '^\[  SKIPPED \] ([A-Za-z]+/)?CudaBatched[A-Za-z]*Test\.' \
               "$build/cuda_batched_forward_test.log" | sort -u || true)"
if [[ -n "$batch_skips" ]]; then
  echo "batching tests skipped on a machine with a GPU:" >&2
  echo "$batch_skips" | head -20 >&2
  status=1
fi
[[ $status == 0 ]] && echo "CUDA checks: all passed on sm_$arch" || echo "CUDA checks: FAILED" >&2
exit $status
