"""A plain float64 forward pass over the dequantized weights of a GGUF MoE model.

Supported architectures (general.architecture):
  qwen3moe   per-head q/k RMSNorm, NEOX rope, softmax router -> top-k -> renormalize
  olmoe      q/k RMSNorm over the whole projection, NEOX rope, softmax -> top-k
  llama      with experts (Mixtral): NORM rope, softmax -> top-k -> renormalize
             (a llama file without experts runs its dense SwiGLU FFN)
  qwen35moe  Gated DeltaNet layers and gated full-attention layers, MoE with a
             sigmoid-gated shared expert
  qwen3next  the same hybrid with ssm_ba (or a legacy ssm_in), value heads grouped
             by key head and plain NEOX rope
  qwen2moe   q/k/v biases, no q/k norm, NEOX rope, softmax -> top-k, and a
             sigmoid-gated shared expert in every layer
  qwen3vlmoe qwen3moe with multi-section rope (rope.dimension_sections); text
             positions (p, p, p, 0)
  glm4moe    q/k/v biases, optional per-head q/k RMSNorm, NEOX rope over
             rope.dimension_count dims; dense SwiGLU in the leading layers, then
             sigmoid router -> top-k of probabilities + exp_probs_b -> weights from
             the unbiased probabilities (renormalized, scaled), and an ungated
             shared expert; the nextn (MTP) blocks after the others do not run
  ernie4_5-moe optional q/k/v biases, NORM rope over the whole head; dense SwiGLU
             in the leading layers, then, in every interleave_moe_layer_step-th
             layer, softmax router -> top-k of probabilities + optional
             exp_probs_b -> weights from the unbiased probabilities
             (renormalized, never scaled) and an ungated shared expert when
             expert_shared_feed_forward_length > 0; the layers past the dense
             ones that the step skips run what llama.cpp's graph runs there
             (its loader gives them expert tensors only): silu of the FFN input
  gpt-oss    q/k/v and output biases, NEOX rope with YaRN over the whole head, a
             learned sink per head in every softmax, a window of the last
             attention.sliding_window positions on the layers the sliding window
             pattern names (period 2 from layer 0 unless the file says otherwise);
             router logits with a bias -> top-k of the raw logits -> softmax over
             those k; experts with biases and the clamped SwiGLU (swiglu_oai)

Everything is computed in float64 with no activation quantization; the Gated
DeltaNet recurrence runs token by token. Hyperparameters come from the file's
own metadata and are checked against the tensor shapes.
"""
import math

import numpy as np

from dequant import dequantize
from gguf_file import GGUFError

SUPPORTED_ARCHS = ("qwen3moe", "olmoe", "llama", "qwen35moe", "qwen3next", "qwen2moe",
                   "qwen3vlmoe", "glm4moe", "ernie4_5-moe", "gpt-oss")
HYBRID_ARCHS = ("qwen35moe", "qwen3next")
# llama.cpp's expert_gating_func values, and its SOFTMAX_WEIGHT (gpt-oss's
# router, which no file names): top-k of the raw logits, softmax over those.
GATING_SOFTMAX, GATING_SIGMOID, GATING_SOFTMAX_WEIGHT = 1, 2, 3
# swiglu_oai's constants in llama.cpp's gpt-oss graph.
OAI_SWIGLU_ALPHA, OAI_SWIGLU_LIMIT = 1.702, 7.0


class ModelError(Exception):
    pass


# --- small numeric helpers ------------------------------------------------------------

def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def l2_normalize(x, eps):
    """x / max(||x||, eps) over the last axis."""
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def rope(x, positions, n_rot, pair_freq, magnitude, neox, pair_positions=None):
    """Rotates the first n_rot dims of every head. x: (T, H, D).

    Pair i turns by position * pair_freq[i]; cos and sin are multiplied by
    magnitude (rope scaling, see RopeScaling). neox pairs (i, i + n_rot/2),
    otherwise adjacent pairs (2i, 2i+1). pair_positions, if given, is a
    (T, n_rot/2) array of the position each pair rotates by (multi-section
    rope); otherwise every pair uses the token position.
    """
    half = n_rot // 2
    if pair_positions is None:
        pair_positions = np.repeat(np.asarray(positions, dtype=np.float64)[:, None], half, axis=1)
    theta = pair_positions * pair_freq[None, :]  # (T, half)
    cos = magnitude * np.cos(theta)[:, None, :]
    sin = magnitude * np.sin(theta)[:, None, :]
    out = x.copy()
    if neox:
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


class RopeScaling:
    """The rope.scaling.* keys (SPEC.md §3.0, §3.0.1), with llama.cpp's
    defaults: type linear, the factor from rope.scale_linear when
    rope.scaling.factor is absent, 0 meaning unscaled, the original context
    the trained one."""

    def __init__(self, key):
        self.type = key("rope.scaling.type", "linear")
        if self.type not in ("none", "linear", "yarn"):
            raise ModelError(f"unsupported rope scaling type {self.type!r}")
        factor = float(key("rope.scaling.factor", key("rope.scale_linear", 0.0)))
        self.factor = 1.0 if factor == 0.0 or self.type == "none" else factor
        self.original_context = int(key("rope.scaling.original_context_length",
                                        key("context_length", 0)))
        self.attn_factor = float(key("rope.scaling.attn_factor", 1.0))

    def frequencies(self, n_rot, base, freq_factors=None):
        """Each pair's angle per position, and the magnitude of cos and sin.
        freq_factors (llama's rope_freqs.weight) divide the angles first.
        YaRN keeps the angle of pairs that turn more than 32 times over the
        original context, divides those turning less than once by the
        factor, blends linearly between, and scales by 1 + 0.1 ln(factor)."""
        i = np.arange(n_rot // 2, dtype=np.float64)
        unscaled = base ** (-2.0 * i / n_rot)
        if freq_factors is not None:
            unscaled = unscaled / freq_factors
        if self.type != "yarn":
            return unscaled / self.factor, self.attn_factor

        def pair_turning(rotations):
            return n_rot * math.log(self.original_context / (2 * math.pi * rotations)) / \
                (2 * math.log(base))

        low = max(0.0, math.floor(pair_turning(32.0)))
        high = min(n_rot - 1.0, math.ceil(pair_turning(1.0)))
        keep = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
        magnitude = 1.0 + 0.1 * math.log(self.factor) if self.factor > 1.0 else 1.0
        return unscaled * ((1.0 - keep) / self.factor + keep), magnitude * self.attn_factor


def imrope_pair_positions(positions, n_rot, sections):
    """Per-pair positions of interleaved multi-section rope for text tokens,
    whose four position ids are (p, p, p, 0): pair i belongs to sector
    s = i mod sum(sections); sectors s = 3k, 3k+1, 3k+2 below 3*sections[0..2]
    take the t, h, w ids (all p), every other sector the fourth id (0)."""
    half = n_rot // 2
    total = sum(sections)
    if total <= 0:
        raise ModelError(f"rope.dimension_sections {sections} sums to zero")
    use_p = np.zeros(half, dtype=bool)
    for i in range(half):
        s = i % total
        use_p[i] = (s % 3 == 0 and s < 3 * sections[0]) or (s % 3 == 1 and s < 3 * sections[1]) \
            or (s % 3 == 2 and s < 3 * sections[2])
    p = np.asarray(positions, dtype=np.float64)[:, None]
    return np.where(use_p[None, :], p, 0.0)


def swiglu_oai(gate, up):
    """gpt-oss's expert activation: the gate clamped above, the up projection
    on both sides, g * sigmoid(alpha g) * (u + 1)."""
    g = np.minimum(gate, OAI_SWIGLU_LIMIT)
    u = np.clip(up, -OAI_SWIGLU_LIMIT, OAI_SWIGLU_LIMIT)
    return g * sigmoid(OAI_SWIGLU_ALPHA * g) * (u + 1.0)


def causal_attention(q, k, v, scale, sinks=None, window=None):
    """q: (T, H, D), k/v: (T, H_kv, Dv). Query head h uses kv head h // (H / H_kv).

    sinks (H,), if given, are logits of one more key per head that has no
    value: they take their share of every softmax (llama.cpp's attention
    sinks). window, if given, masks a key window or more positions before its
    query (llama.cpp's standard sliding window)."""
    T, n_head, _ = q.shape
    n_head_kv = k.shape[1]
    if n_head % n_head_kv:
        raise ModelError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    group = n_head // n_head_kv
    distance = np.arange(T)[:, None] - np.arange(T)[None, :]  # query minus key position
    mask = distance < 0
    if window is not None:
        mask |= distance >= window
    out = np.empty((T, n_head, v.shape[2]))
    for h in range(n_head):
        kv = h // group
        scores = (q[:, h, :] @ k[:, kv, :].T) * scale
        scores[mask] = -np.inf
        if sinks is None:
            probs = softmax(scores, axis=-1)
        else:
            top = np.maximum(np.max(scores, axis=-1, keepdims=True), sinks[h])
            e = np.exp(scores - top)
            probs = e / (np.sum(e, axis=-1, keepdims=True) + np.exp(sinks[h] - top))
        out[:, h, :] = probs @ v[:, kv, :]
    return out


# --- the model ----------------------------------------------------------------------

class Model:
    def __init__(self, gguf):
        self.gguf = gguf
        self.arch = gguf.get("general.architecture")
        if self.arch not in SUPPORTED_ARCHS:
            raise ModelError(f"unsupported architecture {self.arch!r} "
                             f"(supported: {', '.join(SUPPORTED_ARCHS)})")
        self._cache = {}
        a = self.arch
        self.n_embd = self._req("embedding_length")
        self.n_layer = self._req("block_count") - int(self._key("nextn_predict_layers", 0))
        self.eps = float(self._req("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(self._key("rope.freq_base", 10000.0))
        try:
            self.rope_scaling = RopeScaling(self._key)
        except ModelError as e:
            raise ModelError(f"{a}: {e}") from None
        self.n_expert = int(self._key("expert_count", 0))
        self.n_expert_used = int(self._key("expert_used_count", 0))
        ernie = a == "ernie4_5-moe"
        gpt_oss = a == "gpt-oss"
        # llama.cpp's ernie4_5-moe and gpt-oss never read expert_weights_scale
        # or expert_gating_func: ernie routes by softmax, renormalized,
        # unscaled; gpt-oss by its own SOFTMAX_WEIGHT, unscaled.
        self.expert_weights_scale = (0.0 if ernie or gpt_oss
                                     else float(self._key("expert_weights_scale", 0.0)))
        # glm4moe files without expert_gating_func (or with 0) route by sigmoid.
        if gpt_oss:
            self.gating = GATING_SOFTMAX_WEIGHT
        else:
            self.gating = GATING_SOFTMAX if ernie else (
                int(self._key("expert_gating_func", 0)) or
                (GATING_SIGMOID if a == "glm4moe" else GATING_SOFTMAX))
        if self.gating not in (GATING_SOFTMAX, GATING_SIGMOID, GATING_SOFTMAX_WEIGHT):
            raise ModelError(f"{a}: unsupported expert_gating_func {self.gating}")
        if a == "glm4moe":
            self.renormalize = bool(self._key("expert_weights_norm", False))
        else:
            self.renormalize = a in ("qwen3moe", "qwen3vlmoe", "llama", "qwen35moe", "qwen3next",
                                     "ernie4_5-moe")
        self.n_dense_lead = (int(self._key("leading_dense_block_count", 0))
                             if a in ("glm4moe", "ernie4_5-moe") else 0)
        # Layer i >= n_dense_lead runs its experts when (i + 1) % moe_step == 0.
        self.moe_step = int(self._req("interleave_moe_layer_step")) if ernie else 1
        if self.moe_step < 1:
            raise ModelError(f"{a}: interleave_moe_layer_step {self.moe_step} must be > 0")
        # Adjacent pairs (2i, 2i+1) for llama and ernie4_5-moe, (i, i + n_rot/2) for the rest.
        self.neox = a not in ("llama", "ernie4_5-moe")
        if a == "qwen3vlmoe":
            self.sections = list(self._req("rope.dimension_sections"))
        if a in HYBRID_ARCHS:
            self.interval = int(self._key("full_attention_interval", 4))
            # qwen3next's rope is plain NEOX over rope.dimension_count dims.
            self.sections = list(self._req("rope.dimension_sections")) if a == "qwen35moe" else None
            recurrent = self._key("attention.recurrent_layers", None)
            if isinstance(recurrent, list):
                self.recurrent = [bool(recurrent[i]) for i in range(self.n_layer)]
            else:
                self.recurrent = [(i + 1) % self.interval != 0 for i in range(self.n_layer)]
        else:
            self.recurrent = [False] * self.n_layer
        self.sliding_window, self.swa = None, [False] * self.n_layer
        if gpt_oss:
            self.sliding_window = int(self._req("attention.sliding_window"))
            self.swa = self._swa_layers(self._key("attention.sliding_window_pattern", 2))
        self.n_vocab = self.w("token_embd.weight").shape[0]

    # metadata
    def _key(self, name, default=None):
        return self.gguf.get(f"{self.arch}.{name}", default)

    def _req(self, name):
        v = self._key(name)
        if v is None:
            raise ModelError(f"{self.arch}: missing metadata key {self.arch}.{name}")
        return v

    def _swa_layers(self, pattern):
        """llama.cpp's sliding window layers: a list of flags per layer, or a
        period n whose last layer of every n attends fully (0: all slide)."""
        if isinstance(pattern, list):
            if len(pattern) < self.n_layer:
                raise ModelError(f"{self.arch}: attention.sliding_window_pattern has "
                                 f"{len(pattern)} entries for {self.n_layer} layers")
            return [bool(pattern[i]) for i in range(self.n_layer)]
        n = int(pattern)
        return [n == 0 or i % n < n - 1 for i in range(self.n_layer)]

    def _per_layer(self, name, il, default=None):
        v = self._key(name, default)
        if v is None:
            raise ModelError(f"{self.arch}: missing metadata key {self.arch}.{name}")
        return int(v[il]) if isinstance(v, list) else int(v)

    # weights
    def has(self, name):
        return name in self.gguf.tensors

    def w(self, name):
        if name not in self._cache:
            if name not in self.gguf.tensors:
                raise ModelError(f"{self.arch}: missing tensor {name}")
            self._cache[name] = dequantize(self.gguf, name)
        return self._cache[name]

    def rope_freq_factors(self):
        """llama's rope_freqs.weight (per-pair divisors of the rope angles,
        as llama.cpp's llama graph reads them), or None."""
        if self.arch != "llama" or not self.has("rope_freqs.weight"):
            return None
        return self.w("rope_freqs.weight").reshape(-1)

    def _expect_shape(self, name, shape):
        got = self.w(name).shape
        if got != tuple(shape):
            raise ModelError(f"{name}: ne {list(reversed(got))} does not match the metadata "
                             f"(expected {list(reversed(shape))})")

    def linear(self, x, name, bias=None):
        y = x @ self.w(name).T
        if bias and self.has(bias):
            y = y + self.w(bias)
        return y

    # --- forward ---------------------------------------------------------------
    def forward(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            raise ModelError("no input tokens")
        if ids.min() < 0 or ids.max() >= self.n_vocab:
            raise ModelError(f"token id out of range [0, {self.n_vocab})")
        positions = np.arange(ids.size)
        x = self.w("token_embd.weight")[ids]
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = rms_norm(x, self.w(p + "attn_norm.weight"), self.eps)
            if self.recurrent[il]:
                x = x + self.gated_delta_net(il, h)
            elif self.arch in HYBRID_ARCHS:
                x = x + self.gated_attention(il, h, positions)
            else:
                x = x + self.attention(il, h, positions)
            norm = ("post_attention_norm.weight"
                    if self.arch in HYBRID_ARCHS + ("glm4moe", "gpt-oss") else "ffn_norm.weight")
            h = rms_norm(x, self.w(p + norm), self.eps)
            x = x + self.ffn(il, h)
        x = rms_norm(x, self.w("output_norm.weight"), self.eps)
        out = "output.weight" if self.has("output.weight") else "token_embd.weight"
        return x @ self.w(out).T

    def _heads(self, il):
        n_head = self._per_layer("attention.head_count", il)
        n_head_kv = self._per_layer("attention.head_count_kv", il, n_head)
        head_dim = int(self._key("attention.key_length", self.n_embd // n_head))
        v_dim = int(self._key("attention.value_length", head_dim))
        n_rot = int(self._key("rope.dimension_count", head_dim))
        if n_rot % 2 or n_rot > head_dim:
            raise ModelError(f"{self.arch}: rope.dimension_count {n_rot} does not fit head_dim {head_dim}")
        if self.arch in ("ernie4_5-moe", "gpt-oss") and n_rot != head_dim:
            raise ModelError(f"{self.arch}: rope.dimension_count {n_rot} is not head_dim "
                             f"{head_dim} (llama.cpp rotates the whole head)")
        return n_head, n_head_kv, head_dim, v_dim, n_rot

    def attention(self, il, h, positions):
        """Softmax attention of qwen3moe, qwen3vlmoe, qwen2moe, glm4moe, ernie4_5-moe, olmoe,
        llama and gpt-oss."""
        p = f"blk.{il}."
        T = h.shape[0]
        n_head, n_head_kv, hd, vd, n_rot = self._heads(il)
        self._expect_shape(p + "attn_q.weight", (n_head * hd, self.n_embd))
        self._expect_shape(p + "attn_k.weight", (n_head_kv * hd, self.n_embd))
        self._expect_shape(p + "attn_v.weight", (n_head_kv * vd, self.n_embd))
        q = self.linear(h, p + "attn_q.weight", p + "attn_q.bias")
        k = self.linear(h, p + "attn_k.weight", p + "attn_k.bias")
        v = self.linear(h, p + "attn_v.weight", p + "attn_v.bias")
        if self.arch == "olmoe":
            # RMSNorm over the whole projection, before the split into heads.
            q = rms_norm(q, self.w(p + "attn_q_norm.weight"), self.eps)
            k = rms_norm(k, self.w(p + "attn_k_norm.weight"), self.eps)
        q = q.reshape(T, n_head, hd)
        k = k.reshape(T, n_head_kv, hd)
        v = v.reshape(T, n_head_kv, vd)
        if self.arch in ("qwen3moe", "qwen3vlmoe") or (
                self.arch == "glm4moe" and self.has(p + "attn_q_norm.weight")):
            # Per head, after the biases (GLM-4.5 has these norms, GLM-4.5-Air not).
            q = rms_norm(q, self.w(p + "attn_q_norm.weight"), self.eps)
            k = rms_norm(k, self.w(p + "attn_k_norm.weight"), self.eps)
        base = self.rope_base
        if self.swa[il]:
            base = float(self._key("rope.freq_base_swa", self.rope_base))
        freq, magnitude = self.rope_scaling.frequencies(n_rot, base, self.rope_freq_factors())
        pair_pos = (imrope_pair_positions(positions, n_rot, self.sections)
                    if self.arch == "qwen3vlmoe" else None)
        q = rope(q, positions, n_rot, freq, magnitude, self.neox, pair_pos)
        k = rope(k, positions, n_rot, freq, magnitude, self.neox, pair_pos)
        sinks = None
        if self.arch == "gpt-oss":
            self._expect_shape(p + "attn_sinks.weight", (n_head,))
            sinks = self.w(p + "attn_sinks.weight")
        a = causal_attention(q, k, v, 1.0 / math.sqrt(hd), sinks,
                             self.sliding_window if self.swa[il] else None)
        return self.linear(a.reshape(T, n_head * vd), p + "attn_output.weight", p + "attn_output.bias")

    def gated_attention(self, il, h, positions):
        """qwen35moe and qwen3next full-attention layer: q and its output gate interleaved
        per head in attn_q, per-head q/k RMSNorm, partial (qwen35moe: multi-section) rope,
        sigmoid output gate."""
        p = f"blk.{il}."
        T = h.shape[0]
        n_head, n_head_kv, hd, vd, n_rot = self._heads(il)
        self._expect_shape(p + "attn_q.weight", (2 * n_head * hd, self.n_embd))
        qg = self.linear(h, p + "attn_q.weight").reshape(T, n_head, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = self.linear(h, p + "attn_k.weight").reshape(T, n_head_kv, hd)
        v = self.linear(h, p + "attn_v.weight").reshape(T, n_head_kv, vd)
        q = rms_norm(q, self.w(p + "attn_q_norm.weight"), self.eps)
        k = rms_norm(k, self.w(p + "attn_k_norm.weight"), self.eps)
        pair_pos = (None if self.sections is None
                    else imrope_pair_positions(positions, n_rot, self.sections))
        freq, magnitude = self.rope_scaling.frequencies(n_rot, self.rope_base)
        q = rope(q, positions, n_rot, freq, magnitude, True, pair_pos)
        k = rope(k, positions, n_rot, freq, magnitude, True, pair_pos)
        scale = float(self._key("attention.scale", 0.0)) or 1.0 / math.sqrt(hd)
        a = causal_attention(q, k, v, scale)
        o = a.reshape(T, n_head * vd) * sigmoid(gate.reshape(T, n_head * hd))
        return self.linear(o, p + "attn_output.weight")

    def gated_delta_net(self, il, h):
        """qwen35moe and qwen3next Gated DeltaNet layer, run token by token from a zero
        state."""
        p = f"blk.{il}."
        T = h.shape[0]
        K = int(self._req("ssm.conv_kernel"))
        d_k = int(self._req("ssm.state_size"))
        H_k = int(self._req("ssm.group_count"))
        H_v = int(self._req("ssm.time_step_rank"))
        value_dim = int(self._req("ssm.inner_size"))
        if value_dim % H_v:
            raise ModelError(f"ssm.inner_size {value_dim} is not a multiple of ssm.time_step_rank {H_v}")
        d_v = value_dim // H_v
        key_dim = H_k * d_k
        conv_dim = 2 * key_dim + value_dim
        r = H_v // H_k
        self._expect_shape(p + "ssm_conv1d.weight", (conv_dim, K))
        self._expect_shape(p + "ssm_out.weight", (self.n_embd, value_dim))

        if self.arch == "qwen3next" and not self.has(p + "attn_qkv.weight"):
            # Legacy qwen3next: per key head g, [q_g, k_g, v_g (r heads), z_g (r heads)].
            self._expect_shape(p + "ssm_in.weight", (conv_dim + value_dim, self.n_embd))
            mixed = self.linear(h, p + "ssm_in.weight").reshape(T, H_k, 2 * d_k + 2 * r * d_v)
            q_part = mixed[..., :d_k].reshape(T, key_dim)
            k_part = mixed[..., d_k:2 * d_k].reshape(T, key_dim)
            v_part = mixed[..., 2 * d_k:2 * d_k + r * d_v].reshape(T, value_dim)
            m = np.concatenate([q_part, k_part, v_part], axis=1)
            z = mixed[..., 2 * d_k + r * d_v:].reshape(T, H_v, d_v)
        else:
            self._expect_shape(p + "attn_qkv.weight", (conv_dim, self.n_embd))
            self._expect_shape(p + "attn_gate.weight", (value_dim, self.n_embd))
            m = self.linear(h, p + "attn_qkv.weight")            # (T, conv_dim)
            z = self.linear(h, p + "attn_gate.weight").reshape(T, H_v, d_v)
        if self.arch == "qwen3next":
            # ssm_ba: per key head g, the beta of its r value heads, then their alpha.
            self._expect_shape(p + "ssm_ba.weight", (2 * H_v, self.n_embd))
            ba = self.linear(h, p + "ssm_ba.weight").reshape(T, H_k, 2 * r)
            b = ba[..., :r].reshape(T, H_v)
            alpha = ba[..., r:].reshape(T, H_v)
        else:
            self._expect_shape(p + "ssm_beta.weight", (H_v, self.n_embd))
            self._expect_shape(p + "ssm_alpha.weight", (H_v, self.n_embd))
            b = self.linear(h, p + "ssm_beta.weight")
            alpha = self.linear(h, p + "ssm_alpha.weight")
        beta = sigmoid(b)  # (T, H_v)
        g = self.w(p + "ssm_a") * softplus(alpha + self.w(p + "ssm_dt.bias"))  # (T, H_v), <= 0

        # Causal depthwise conv: tap K-1 multiplies the current token, earlier taps
        # the K-1 tokens before it (zeros before the sequence start).
        conv_w = self.w(p + "ssm_conv1d.weight")  # (conv_dim, K)
        padded = np.concatenate([np.zeros((K - 1, conv_dim)), m], axis=0)
        u = np.zeros((T, conv_dim))
        for i in range(K):
            u += padded[i:i + T] * conv_w[:, i]
        u = silu(u)

        q = l2_normalize(u[:, :key_dim].reshape(T, H_k, d_k), self.eps) / math.sqrt(d_k)
        k = l2_normalize(u[:, key_dim:2 * key_dim].reshape(T, H_k, d_k), self.eps)
        v = u[:, 2 * key_dim:].reshape(T, H_v, d_v)

        o = np.zeros((T, H_v, d_v))
        for j in range(H_v):
            # qwen35 files tile the value heads over the key heads; qwen3next groups them.
            kh = j % H_k if self.arch == "qwen35moe" else j // r
            S = np.zeros((d_k, d_v))
            for t in range(T):
                S *= math.exp(g[t, j])
                delta = beta[t, j] * (v[t, j] - S.T @ k[t, kh])
                S += np.outer(k[t, kh], delta)
                o[t, j] = S.T @ q[t, kh]

        n = rms_norm(o, self.w(p + "ssm_norm.weight"), self.eps) * silu(z)
        return self.linear(n.reshape(T, value_dim), p + "ssm_out.weight")

    def _expert_width(self, il):
        if self.arch in ("olmoe", "llama"):
            return self._per_layer("feed_forward_length", il)
        if self.arch == "gpt-oss":  # llama.cpp requires the key
            return self._per_layer("expert_feed_forward_length", il)
        if self._key("expert_feed_forward_length") is not None:
            return self._per_layer("expert_feed_forward_length", il)
        return self._per_layer("feed_forward_length", il) // max(self.n_expert_used, 1)

    def dense_ffn(self, il, h):
        p = f"blk.{il}."
        if self.arch in ("glm4moe", "ernie4_5-moe"):
            n_ff = self._per_layer("feed_forward_length", il)
            self._expect_shape(p + "ffn_gate.weight", (n_ff, self.n_embd))
            self._expect_shape(p + "ffn_up.weight", (n_ff, self.n_embd))
            self._expect_shape(p + "ffn_down.weight", (self.n_embd, n_ff))
        return self.linear(silu(self.linear(h, p + "ffn_gate.weight")) * self.linear(h, p + "ffn_up.weight"),
                           p + "ffn_down.weight")

    def _expert_fn(self, p, gate_w, up_w, down_w, n_ff):
        """expert(e, x): routed expert e of the layer on one token. gpt-oss's
        experts add biases to gate, up and down and run swiglu_oai; the
        others are plain SwiGLU."""
        if self.arch != "gpt-oss":
            return lambda e, x: down_w[e] @ (silu(gate_w[e] @ x) * (up_w[e] @ x))
        self._expect_shape(p + "ffn_gate_exps.bias", (self.n_expert, n_ff))
        self._expect_shape(p + "ffn_up_exps.bias", (self.n_expert, n_ff))
        self._expect_shape(p + "ffn_down_exps.bias", (self.n_expert, self.n_embd))
        gate_b = self.w(p + "ffn_gate_exps.bias")
        up_b = self.w(p + "ffn_up_exps.bias")
        down_b = self.w(p + "ffn_down_exps.bias")
        return lambda e, x: down_w[e] @ swiglu_oai(gate_w[e] @ x + gate_b[e],
                                                   up_w[e] @ x + up_b[e]) + down_b[e]

    def ffn(self, il, h):
        p = f"blk.{il}."
        if il < self.n_dense_lead:
            return self.dense_ffn(il, h)
        if (il + 1) % self.moe_step != 0:
            # ernie4_5-moe: a converted file would hold a dense FFN here, which
            # llama.cpp cannot load; what it loads has expert tensors, which its
            # graph leaves alone, running build_ffn with no tensors: silu.
            if self.has(p + "ffn_gate.weight"):
                return self.dense_ffn(il, h)
            return silu(h)
        if not self.has(p + "ffn_gate_inp.weight"):
            if self.arch == "llama" and self.has(p + "ffn_gate.weight"):
                return self.dense_ffn(il, h)
            raise ModelError(f"{self.arch}: missing tensor {p}ffn_gate_inp.weight")
        n_ff = self._expert_width(il)
        self._expect_shape(p + "ffn_gate_inp.weight", (self.n_expert, self.n_embd))
        self._expect_shape(p + "ffn_gate_exps.weight", (self.n_expert, n_ff, self.n_embd))
        self._expect_shape(p + "ffn_up_exps.weight", (self.n_expert, n_ff, self.n_embd))
        self._expect_shape(p + "ffn_down_exps.weight", (self.n_expert, self.n_embd, n_ff))
        gate_w = self.w(p + "ffn_gate_exps.weight")
        up_w = self.w(p + "ffn_up_exps.weight")
        down_w = self.w(p + "ffn_down_exps.weight")
        expert = self._expert_fn(p, gate_w, up_w, down_w, n_ff)
        router_logits = self.linear(h, p + "ffn_gate_inp.weight", p + "ffn_gate_inp.bias")
        if self.gating == GATING_SIGMOID:
            probs = sigmoid(router_logits)
        elif self.gating == GATING_SOFTMAX_WEIGHT:
            probs = router_logits  # the softmax comes after the top-k
        else:
            probs = softmax(router_logits, axis=-1)
        # glm4moe: the selection bias picks the experts, the unbiased
        # probabilities weigh them.
        selection = probs
        if self.has(p + "exp_probs_b.bias"):
            # Converted ERNIE-4.5 files store it {n_expert, 1}.
            bias = self.w(p + "exp_probs_b.bias").reshape(-1)
            if bias.size != self.n_expert:
                raise ModelError(f"{p}exp_probs_b.bias: {bias.size} values for "
                                 f"{self.n_expert} experts")
            selection = probs + bias
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-selection[t], kind="stable")[:self.n_expert_used]
            weights = probs[t, top]
            if self.gating == GATING_SOFTMAX_WEIGHT:
                weights = softmax(weights)
            if self.renormalize:
                weights = weights / max(weights.sum(), 6.103515625e-5)
            if self.expert_weights_scale and self.expert_weights_scale != 1.0:
                weights = weights * self.expert_weights_scale
            for e, wgt in zip(top, weights):
                out[t] += wgt * expert(e, h[t])
        # ernie4_5-moe: llama.cpp runs the shared expert when its width is set.
        shared_width = (int(self._key("expert_shared_feed_forward_length", 0))
                        if self.arch == "ernie4_5-moe" else None)
        if shared_width == 0:
            return out
        if self.has(p + "ffn_gate_shexp.weight") or shared_width:
            if self.arch in ("glm4moe", "ernie4_5-moe"):
                n_ff_shexp = shared_width or n_ff * int(self._key("expert_shared_count", 0))
                self._expect_shape(p + "ffn_gate_shexp.weight", (n_ff_shexp, self.n_embd))
                self._expect_shape(p + "ffn_up_shexp.weight", (n_ff_shexp, self.n_embd))
                self._expect_shape(p + "ffn_down_shexp.weight", (self.n_embd, n_ff_shexp))
            shared = silu(self.linear(h, p + "ffn_gate_shexp.weight")) * self.linear(h, p + "ffn_up_shexp.weight")
            shared = self.linear(shared, p + "ffn_down_shexp.weight")
            if self.has(p + "ffn_gate_inp_shexp.weight"):
                shared = sigmoid(h @ self.w(p + "ffn_gate_inp_shexp.weight"))[:, None] * shared
            out += shared
        return out


def load(path):
    from gguf_file import GGUFFile
    try:
        return Model(GGUFFile(path))
    except GGUFError as e:
        raise ModelError(str(e)) from e
