#!/bin/sh
# Remakes the test vector tests/data/vectors/mixed-low-bit.*: a tiny qwen3moe
# (moetier-synth) whose tensors cover the types beyond Q4_0 and the common
# K-quants, llama.cpp's logits for it (llamacpp_logits.mjs) and a float64
# pass over its dequantized weights (../float64_forward.py).
#
#   tests/interop/llamacpp-oracle/make_vectors.sh [BUILD_DIR]
#
# Needs a built tree (default: build/), node and npm (node-llama-cpp with its
# prebuilt llama.cpp binaries is installed here on first use) and Debian's
# python3-numpy.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:-$root/build}
out=$root/tests/data/vectors
name=mixed-low-bit

if [ ! -d "$here/node_modules/node-llama-cpp" ]; then
  npm install --prefix "$here" --ignore-scripts --no-audit --no-fund
fi

# Every layer-0 matrix, the expert matrices of layer 1, the embedding (which
# llama.cpp decodes exactly, with no activation rounding) and the output get
# one of the types; the rest stays Q8_0. Rows: 256 for the embedding and the
# experts, 128 for attn_output. The first matching rule wins, so the
# attn_output rules come before output.weight's.
"$build/tools/synth/moetier-synth" --arch qwen3moe --preset tiny --embd 256 --quant q8_0 \
  --seed 11 --quiet \
  --tensor-type blk.0.attn_q.weight=q4_1 --tensor-type blk.0.attn_k.weight=q5_0 \
  --tensor-type blk.0.attn_v.weight=q5_1 --tensor-type blk.0.attn_output.weight=iq4_nl \
  --tensor-type blk.1.attn_output.weight=q8_0 \
  --tensor-type token_embd.weight=q3_k --tensor-type output.weight=iq4_xs \
  --tensor-type blk.0.ffn_gate_exps=q2_k --tensor-type blk.0.ffn_up_exps=q3_k \
  --tensor-type blk.0.ffn_down_exps=iq4_xs --tensor-type blk.1.ffn_gate_exps=mxfp4 \
  --tensor-type blk.1.ffn_up_exps=iq4_nl --tensor-type blk.1.ffn_down_exps=q2_k \
  --out "$out/$name.gguf"
echo "1,17,300,42,7,499,212,3,88,100,250,61,5,77,123,456,9,300,18,402,33,271,144,8" \
  > "$out/$name.ids"
node "$here/llamacpp_logits.mjs" "$out/$name.gguf" "$out/$name.ids" "$out/$name.llamacpp.f32"
# The float64 pass, and how far llama.cpp is from it (its activations are
# 8-bit, so about 1e-3 to 1e-2 of mean KL is expected; a misread block layout
# shows as far more).
/usr/bin/python3 "$root/tests/interop/float64_forward.py" "$out/$name.gguf" \
  --ids-file "$out/$name.ids" --out "$out/$name.exact.f32" \
  --compare "$out/$name.llamacpp.f32" --tolerance-of-range 1 --quiet
