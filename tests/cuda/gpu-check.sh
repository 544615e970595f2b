#!/usr/bin/env bash
# The whole GPU check, from a bundle made by tests/cuda/make-gpu-bundle.sh,
# on the GPU host (no build there):
#   1. every CUDA test; on a GPU the only allowed skip is the case written for
#      machines without one
#   2. the full synthetic Qwen3-30B-A3B model, Q4_K_M mix, written with every
#      core (about 17 GiB, outside the log folder; skipped with --model FILE;
#      --layers N writes a shorter model of the same shapes)
#   3. moetier-bench-cuda (every expert resident, against the HBM roofline),
#      then its decode without CUDA graphs, with the MoE routing on the host,
#      with one expert at a time (what each of these saves) and with the chat
#      sampler; each run ends with where its device time went, by phase
#   4. moetier-bench-cache --device cuda:0 (the cache-size table), with the
#      router's own routing, then again replaying a moetier-tracegen trace of
#      the model's shape, calibrated to real routing (the trace is
#      Qwen3-30B-A3B's shape: with --model FILE of another shape, pass
#      --skip-trace)
#   5. moetier-bench-cuda decoding after --depth positions (default 32768,
#      skipped, not computed) with q8_0 keys and values; --depth 0 leaves
#      it out
#
# usage: gpu-check.sh [--out DIR] [--data DIR] [--model FILE] [--layers N] [--work DIR]
#                     [--runs N] [--decode-tokens N] [--prompt-tokens N] [--depth N]
#                     [--skip-tests] [--skip-bench] [--skip-trace]
# Logs and JSON go to --out (default $OUT when set, else gpu-check-out); the
# model to --work (default /tmp/moetier-gpu-check). --data is the tests/data
# folder of a checkout, for a bundle made --without-data. Exits non-zero when
# a test fails or skips, or a step fails.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$PWD/gpu-check-out}"
work=/tmp/moetier-gpu-check
model=""
layers=""
runs=3
decode=128
prompt=512
depth=32768
skip_tests=0
skip_bench=0
skip_trace=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --data) export MOETIER_TEST_DATA_DIR="$(cd "$2" && pwd)"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --decode-tokens) decode="$2"; shift 2 ;;
    --prompt-tokens) prompt="$2"; shift 2 ;;
    --depth) depth="$2"; shift 2 ;;
    --skip-tests) skip_tests=1; shift ;;
    --skip-bench) skip_bench=1; shift ;;
    --skip-trace) skip_trace=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out" "$work"
start=$SECONDS
step() { printf '\n=== %s (at %d s)\n' "$1" $((SECONDS - start)) | tee -a "$out/summary.txt"; }
status=0

step "device"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader |
  tee -a "$out/summary.txt" || { echo "nvidia-smi failed: no usable GPU" | tee -a "$out/summary.txt"; exit 1; }

if [[ $skip_tests == 0 ]]; then
  step "CUDA tests"
  allowed_skip='a CUDA device is present; this case is for GPU-less machines'
  while read -r t; do
    log="$out/$t.log"
    "$here/run" "$t" --gtest_color=no >"$log" 2>&1
    rc=$?
    passed=$(grep -c '^\[       OK \]' "$log")
    failed=$(grep -Ec '^\[  FAILED  \] [^ ]+ \([0-9]+ ms\)' "$log")
    skipped=$(grep -Ec '^\[  SKIPPED \] [^ ]+ \([0-9]+ ms\)' "$log")
    allowed=$(grep -cF "$allowed_skip" "$log")
    verdict=ok
    if [[ $rc != 0 || $failed != 0 ]]; then verdict=FAILED; status=1; fi
    if (( skipped > allowed )); then verdict="FAILED (skips on a GPU)"; status=1; fi
    printf '%-28s %-24s passed %s, failed %s, skipped %s\n' "$t" "$verdict" "$passed" "$failed" \
      "$skipped" | tee -a "$out/summary.txt"
    grep -E '^\[  FAILED  \] [^ ]+ \(|Failure$' "$log" | head -10 | tee -a "$out/summary.txt"
  done < "$here/cuda-tests.txt"
fi

if [[ $skip_bench == 0 ]]; then
  if [[ -z "$model" ]]; then
    step "synthetic model"
    model="$work/full-q4_k_m${layers:+-$layers-layers}.gguf"
    if [[ ! -s "$model" ]]; then
      "$here/run" moetier-synth --preset full --quant q4_k_m ${layers:+--layers "$layers"} \
        --threads "$(nproc)" --out "$model" 2>&1 | tail -1 | tee -a "$out/summary.txt" || status=1
    fi
  fi
  step "moetier-bench-cuda (every expert resident)"
  "$here/run" moetier-bench-cuda --model "$model" --runs "$runs" --decode-tokens "$decode" \
    --prompt-tokens "$prompt" --batch "$prompt" >"$out/bench-cuda.log" 2>&1 || status=1
  tail -18 "$out/bench-cuda.log" | tee -a "$out/summary.txt"
  # The same decode without the step's CUDA graph, with the host's routing
  # (one sync per MoE layer), then with one expert at a time: what each saves.
  # And with the chat sampler (top-k 40 selected on the device).
  for how in no-graphs host-routing expert-at-a-time "sampling chat"; do
    step "moetier-bench-cuda --$how (decode only)"
    log="$out/bench-cuda-${how// /-}.log"
    # shellcheck disable=SC2086  # "sampling chat" is a flag and its value
    "$here/run" moetier-bench-cuda --model "$model" --runs "$runs" --decode-tokens "$decode" \
      --prompt-tokens 16 --batch 16 --$how >"$log" 2>&1 || status=1
    grep -E '^(sampling|experts|decode|roofline|check)' "$log" | tee -a "$out/summary.txt"
  done
  step "moetier-bench-cache --device cuda:0"
  "$here/run" moetier-bench-cache --model "$model" --device cuda:0 --runs "$runs" \
    --decode-tokens "$decode" --prompt-tokens "$prompt" --json "$out/bench-cache.json" \
    >"$out/bench-cache.log" 2>&1 || status=1
  tail -40 "$out/bench-cache.log" | tee -a "$out/summary.txt"
  if [[ $skip_trace == 0 ]]; then
    step "moetier-bench-cache --device cuda:0 --routing-from-trace (Qwen3-30B-A3B shape)"
    trace="$work/qwen3${layers:+-$layers-layers}.trace"
    "$here/run" moetier-tracegen --shape qwen3 ${layers:+--layers "$layers"} --tokens 8192 \
      --out "$trace" >"$out/tracegen.log" 2>&1 || status=1
    "$here/run" moetier-bench-cache --model "$model" --device cuda:0 --runs "$runs" \
      --decode-tokens "$decode" --prompt-tokens "$prompt" --routing-from-trace "$trace" \
      --json "$out/bench-cache-trace.json" >"$out/bench-cache-trace.log" 2>&1 || status=1
    tail -40 "$out/bench-cache-trace.log" | tee -a "$out/summary.txt"
  fi
  if [[ $depth -gt 0 ]]; then
    step "moetier-bench-cuda at $depth positions, q8_0 KV"
    "$here/run" moetier-bench-cuda --model "$model" --runs "$runs" --decode-tokens 32 \
      --prompt-tokens 16 --batch 16 --context "$depth" --skip-context --cache-type-k q8_0 \
      --cache-type-v q8_0 >"$out/bench-cuda-depth.log" 2>&1 || status=1
    tail -8 "$out/bench-cuda-depth.log" | tee -a "$out/summary.txt"
  fi
fi

step "done: $([[ $status == 0 ]] && echo all passed || echo FAILED) (logs in $out)"
exit $status
