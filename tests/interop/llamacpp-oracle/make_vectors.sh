#!/bin/sh
# Remakes the test vectors made here (tests/data/vectors/README.md, "Made
# here"): tiny models written by moetier-synth, llama.cpp's logits for them
# (llamacpp_logits.mjs) and a float64 pass over their dequantized weights
# (../float64_forward.py).
#   mixed-low-bit             a qwen3moe whose tensors cover the types beyond
#                             Q4_0 and the common K-quants
#   iq-grids-low-bit          the same shape with the i-quant grid types
#                             (IQ1_S ... IQ3_S)
#   yarn-tiny-f32             qwen3moe with YaRN rope scaling
#   mixtral-linear-tiny-f32   llama with experts, linearly scaled rope
#   mixtral-rope-freqs-tiny-f32  llama with experts and rope_freqs.weight
#   qwen35moe-yarn-tiny-f32   qwen35moe with YaRN and a rope pair held at
#                             position 0 (sections [3,1,0,0])
#   qwen3next-tiny-f32        qwen3next: ssm_ba, value heads grouped by key head
#   qwen3next-ssm-in-tiny-f32 qwen3next with the legacy ssm_in projection
#   qwen3next-small-q4_k_m    qwen3next, Q4_K_M-like (quantized ssm_ba rows)
#   qwen2moe-tiny-f32         qwen2moe: q/k/v biases, GQA, a shared expert
#   qwen2moe-small-q4_k_m     qwen2moe, Q4_K_M-like, one KV head per head
#                             (Qwen1.5-MoE's plain multi-head attention)
#   qwen3vlmoe-tiny-f32       qwen3vlmoe (Qwen3-VL's language model): rope
#                             sections holding 4 of 16 pairs at position 0
#   qwen3vlmoe-small-q4_k_m   qwen3vlmoe, Q4_K_M-like, Qwen3-VL's proportions
#   glm4moe-tiny-f32          glm4moe (GLM-4.5-Air's layout): a dense first
#                             layer, a sigmoid router with a selection bias,
#                             routing scale 1.8, a shared expert, rope over
#                             half of each head, a nextn block that never runs
#   glm4moe-small-q4_k_m      glm4moe, Q4_K_M-like, with GLM-4.5's q/k norm
#   ernie45moe-tiny-f32       ernie4_5-moe (ERNIE-4.5's layout): a dense first
#                             layer, a softmax router with a selection bias,
#                             a shared expert, q/k/v biases, NORM rope
#   ernie45moe-small-q4_k_m   ernie4_5-moe, Q4_K_M-like, as ERNIE-4.5-21B-A3B
#                             without biases and with a tied output
#   gpt-oss-tiny-f32          gpt-oss (gpt-oss-20b's layout): attention sinks,
#                             a window of 8 on layers 0 and 2, YaRN x4 from 64,
#                             biases everywhere, swiglu_oai; 256 positions
#   gpt-oss-small-mxfp4       gpt-oss as OpenAI released it: experts MXFP4,
#                             other matrices Q8_0; window 16, YaRN x32 from 64
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

# llama.cpp's logits and the float64 pass for "$out/$1.gguf" on "$out/$1.ids",
# and how far apart the two are (on quantized weights llama.cpp's activations
# are 8-bit, so about 1e-3 to 1e-2 of mean KL is expected; a misread block
# layout or rope shows as far more).
oracles() {
  node "$here/llamacpp_logits.mjs" "$out/$1.gguf" "$out/$1.ids" "$out/$1.llamacpp.f32"
  /usr/bin/python3 "$root/tests/interop/float64_forward.py" "$out/$1.gguf" \
    --ids-file "$out/$1.ids" --out "$out/$1.exact.f32" \
    --compare "$out/$1.llamacpp.f32" --tolerance-of-range 1 --quiet
}
oracles "$name"

# Each i-quant grid type in at least one matrix product; the embedding (IQ3_S)
# llama.cpp decodes without activation rounding. attn_output (rows of 128)
# cannot hold these 256-value blocks and stays Q8_0.
name=iq-grids-low-bit
"$build/tools/synth/moetier-synth" --arch qwen3moe --preset tiny --embd 256 --quant q8_0 \
  --seed 12 --quiet \
  --tensor-type token_embd.weight=iq3_s --tensor-type blk.0.attn_output.weight=q8_0 \
  --tensor-type blk.1.attn_output.weight=q8_0 --tensor-type output.weight=iq3_xxs \
  --tensor-type blk.0.attn_q.weight=iq2_s --tensor-type blk.0.attn_k.weight=iq2_xs \
  --tensor-type blk.0.attn_v.weight=iq1_m --tensor-type blk.1.attn_k.weight=iq3_s \
  --tensor-type blk.0.ffn_gate_exps=iq2_xxs --tensor-type blk.0.ffn_up_exps=iq3_xxs \
  --tensor-type blk.0.ffn_down_exps=iq1_s --tensor-type blk.1.ffn_gate_exps=iq3_s \
  --tensor-type blk.1.ffn_up_exps=iq2_s --tensor-type blk.1.ffn_down_exps=iq2_xs \
  --out "$out/$name.gguf"
echo "1,17,300,42,7,499,212,3,88,100,250,61,5,77,123,456,9,300,18,402,33,271,144,8" \
  > "$out/$name.ids"
oracles "$name"

# Writes "$out/$1.gguf" with moetier-synth and the remaining arguments, the
# ids every file below runs, and its oracles.
made() {
  name=$1
  shift
  "$build/tools/synth/moetier-synth" --quiet --out "$out/$name.gguf" "$@"
  echo "3,250,17,480,99,1,305,42,77,260,8,511,130,64,2,371,19,444,150,23,300,7,88,401" \
    > "$out/$name.ids"
  oracles "$name"
}

# Rope scaling: original contexts shorter than the 24 positions, so that
# YaRN's ramp lies inside the rotated pairs and the positions pass it.
synth() {
  name=$1
  shift
  made "$name" --preset tiny --quant f32 --layers 2 "$@"
}
synth yarn-tiny-f32 --arch qwen3moe --seed 21 --expert-ffn 64 --rope-scaling yarn \
  --rope-scaling-factor 4 --rope-original-context 16
synth mixtral-linear-tiny-f32 --arch llama --seed 22 --rope-scaling linear --rope-scaling-factor 2
synth mixtral-rope-freqs-tiny-f32 --arch llama --seed 24 --rope-freq-factors
synth qwen35moe-yarn-tiny-f32 --arch qwen35moe --seed 23 --full-attention-interval 2 \
  --rope-sections 3,1,0,0 --rope-scaling yarn --rope-scaling-factor 8 --rope-original-context 16

# qwen3next: value heads twice the key heads, so grouped and tiled orders
# differ; the legacy file also has an attention layer every second layer.
made qwen3next-tiny-f32 --arch qwen3next --preset tiny --quant f32 --seed 31
made qwen3next-ssm-in-tiny-f32 --arch qwen3next --preset tiny --quant f32 --seed 32 \
  --legacy-ssm-in --full-attention-interval 2
made qwen3next-small-q4_k_m --arch qwen3next --preset small --quant q4_k_m --seed 33

# qwen2moe: the biases and the shared expert in every layer.
made qwen2moe-tiny-f32 --arch qwen2moe --preset tiny --quant f32 --seed 41
made qwen2moe-small-q4_k_m --arch qwen2moe --preset small --quant q4_k_m --seed 42 --heads-kv 4

# qwen3vlmoe: sections [1,6,6,0] hold pairs 3, 6, 9 and 12 at position 0
# (the real proportions hold only the slowest pairs, which barely turn in 24
# positions).
made qwen3vlmoe-tiny-f32 --arch qwen3vlmoe --preset tiny --quant f32 --seed 51 \
  --rope-sections 1,6,6,0
made qwen3vlmoe-small-q4_k_m --arch qwen3vlmoe --preset small --quant q4_k_m --seed 52 \
  --experts 16

# glm4moe: exp_probs_b changes which experts are chosen but not their
# weights; the nextn block after the layers that run is in the file, as in
# converted GLM files, and must not run (llama.cpp skips its tensors).
made glm4moe-tiny-f32 --arch glm4moe --preset tiny --quant f32 --seed 61
made glm4moe-small-q4_k_m --arch glm4moe --preset small --quant q4_k_m --seed 62

# ernie4_5-moe: exp_probs_b changes which experts are chosen but not their
# weights; the shared expert has no gate; rope turns adjacent pairs.
made ernie45moe-tiny-f32 --arch ernie4_5-moe --preset tiny --quant f32 --seed 71
made ernie45moe-small-q4_k_m --arch ernie4_5-moe --preset small --quant q4_k_m --seed 72

# As made, with 256 ids below the vocabulary size $2 (fixed by a seed)
# instead of the 24 above: gpt-oss's sliding windows (8 tiny, 16 small) and
# YaRN's original context (64) are passed many times over.
made_long() {
  name=$1
  n_vocab=$2
  shift 2
  "$build/tools/synth/moetier-synth" --quiet --out "$out/$name.gguf" "$@"
  /usr/bin/python3 -c "import random; r = random.Random(80); \
print(','.join(str(r.randrange($n_vocab)) for _ in range(256)))" > "$out/$name.ids"
  oracles "$name"
}
made_long gpt-oss-tiny-f32 512 --arch gpt-oss --preset tiny --quant f32 --seed 81
made_long gpt-oss-small-mxfp4 4096 --arch gpt-oss --preset small --quant mxfp4 --seed 82
