"""Dequantizers for the ggml tensor types, written from the block layouts
(ggml-common.h / ggml-quants.c), vectorized with numpy. Every function takes
the raw bytes of a tensor and returns a flat float64 array of its elements in
storage order (ne[0] fastest)."""
import numpy as np

from gguf_file import GGUFError

QK_K = 256


def _blocks(raw, block_bytes):
    buf = np.frombuffer(raw, dtype=np.uint8)
    if buf.size % block_bytes:
        raise GGUFError(f"{buf.size} bytes is not a whole number of {block_bytes}-byte blocks")
    return buf.reshape(-1, block_bytes)


def _half(blocks, start):
    """The binary16 at byte `start` of every block, as an (n, 1) float64 column."""
    return blocks[:, start:start + 2].copy().view("<f2").astype(np.float64)


def _nibbles32(qs):
    """qs (n, 16) -> (n, 32): element j is the low nibble of qs[j], element
    j+16 the high nibble (not interleaved)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int64)


def _fifth_bit32(qh_bytes):
    """qh (n, 4) little-endian u32 -> (n, 32): bit e for element e."""
    qh = qh_bytes.copy().view("<u4").astype(np.int64)  # (n, 1)
    return (qh >> np.arange(32)) & 1


def dequant_f32(raw):
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


def dequant_f16(raw):
    return np.frombuffer(raw, dtype="<f2").astype(np.float64)


def dequant_bf16(raw):
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)


def dequant_q8_0(raw):
    b = _blocks(raw, 34)
    d = _half(b, 0)
    qs = b[:, 2:34].view(np.int8).astype(np.float64)
    return (d * qs).reshape(-1)


def dequant_q4_0(raw):
    b = _blocks(raw, 18)
    d = _half(b, 0)
    q = _nibbles32(b[:, 2:18])
    return (d * (q - 8)).reshape(-1)


def dequant_q4_1(raw):
    b = _blocks(raw, 20)
    d, m = _half(b, 0), _half(b, 2)
    q = _nibbles32(b[:, 4:20])
    return (d * q + m).reshape(-1)


def dequant_q5_0(raw):
    b = _blocks(raw, 22)
    d = _half(b, 0)
    q = _nibbles32(b[:, 6:22]) | (_fifth_bit32(b[:, 2:6]) << 4)
    return (d * (q - 16)).reshape(-1)


def dequant_q5_1(raw):
    b = _blocks(raw, 24)
    d, m = _half(b, 0), _half(b, 2)
    q = _nibbles32(b[:, 8:24]) | (_fifth_bit32(b[:, 4:8]) << 4)
    return (d * q + m).reshape(-1)


def _k4_scales_mins(sb):
    """The 12 packed bytes of Q4_K / Q5_K -> (scales, mins), each (n, 8) int64."""
    s = sb.astype(np.int64)
    sc = np.empty((s.shape[0], 8), dtype=np.int64)
    mn = np.empty_like(sc)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def _k4_nibbles(qs):
    """qs (n, 128) -> (n, 8, 32): sub-block 2c takes the low nibbles of
    qs[32c:32c+32], sub-block 2c+1 their high nibbles."""
    q = qs.reshape(-1, 4, 32).astype(np.int64)
    return np.stack([q & 0x0F, q >> 4], axis=2).reshape(-1, 8, 32)


def dequant_q4_k(raw):
    b = _blocks(raw, 144)
    d, dmin = _half(b, 0), _half(b, 2)
    sc, mn = _k4_scales_mins(b[:, 4:16])
    q = _k4_nibbles(b[:, 16:144])
    y = (d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]
    return y.reshape(-1)


def dequant_q5_k(raw):
    b = _blocks(raw, 176)
    d, dmin = _half(b, 0), _half(b, 2)
    sc, mn = _k4_scales_mins(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int64)  # (n, 32); bit j is sub-block j's 5th bit
    high = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1
    q = _k4_nibbles(b[:, 48:176]) + 16 * high
    y = (d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]
    return y.reshape(-1)


def dequant_q6_k(raw):
    b = _blocks(raw, 210)
    ql = b[:, 0:128].reshape(-1, 2, 2, 32).astype(np.int64)   # [half h][ql sub-row 32*(m&1)][l]
    qh = b[:, 128:192].reshape(-1, 2, 32).astype(np.int64)    # [half h][l]
    scales = b[:, 192:208].view(np.int8).astype(np.float64)  # (n, 16), one per 16 elements
    d = _half(b, 208)
    # Within each 128-element half, group m (32 elements) takes the low nibble of
    # ql row (m & 1) for m < 2 and the high nibble for m >= 2, with bits 2m..2m+1 of qh.
    lo = np.stack([ql[:, :, 0] & 0x0F, ql[:, :, 1] & 0x0F, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)
    hi = (qh[:, :, None, :] >> (2 * np.arange(4))[None, None, :, None]) & 3
    q = (lo | (hi << 4)) - 32  # (n, 2, 4, 32)
    y = q.reshape(-1, 16, 16) * (d * scales)[:, :, None]
    return y.reshape(-1)


IQ4_NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                          1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)
# E2M1 values doubled; the block exponent is then e - 128.
MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)


def dequant_iq4_nl(raw):
    b = _blocks(raw, 18)
    d = _half(b, 0)
    return (d * IQ4_NL_LEVELS[_nibbles32(b[:, 2:18])]).reshape(-1)


def dequant_mxfp4(raw):
    b = _blocks(raw, 17)
    scale = np.ldexp(1.0, b[:, 0:1].astype(np.int64) - 128)
    return (MXFP4_LEVELS[_nibbles32(b[:, 1:17])] * scale).reshape(-1)


def _k_low_bits(qs):
    """qs (n, 64) -> (n, 256): element 128h + 32j + l is bits 2j..2j+1 of qs[32h + l]."""
    q = qs.reshape(-1, 2, 1, 32).astype(np.int64)
    return ((q >> (2 * np.arange(4))[None, None, :, None]) & 3).reshape(-1, 256)


def dequant_q2_k(raw):
    b = _blocks(raw, 84)
    sc = b[:, 0:16].astype(np.int64)
    d, dmin = _half(b, 80), _half(b, 82)
    q = _k_low_bits(b[:, 16:80]).reshape(-1, 16, 16)
    y = (d * (sc & 0x0F))[:, :, None] * q - (dmin * (sc >> 4))[:, :, None]
    return y.reshape(-1)


def dequant_q3_k(raw):
    b = _blocks(raw, 110)
    hmask = b[:, 0:32].astype(np.int64)
    s = b[:, 96:108].astype(np.int64)
    d = _half(b, 108)
    low, high = s[:, 0:8], s[:, 8:12]
    # Scales 0..7 take the low nibbles of bytes 0..7, scales 8..15 their high
    # nibbles; bits 4..5 of scale 4r+k are bits 2r..2r+1 of byte 8+k.
    nib = np.concatenate([low & 0x0F, low >> 4], axis=1)  # (n, 16)
    top = (high[:, None, :] >> (2 * np.arange(4))[None, :, None]) & 3  # (n, 4 rows, 4 k)
    scales = nib | (top.reshape(-1, 16) << 4)
    hb = (hmask[:, None, :] >> np.arange(8)[None, :, None]) & 1  # (n, 8 = e // 32, 32 = l)
    q = _k_low_bits(b[:, 32:96]) - 4 * (1 - hb.reshape(-1, 256))
    y = (d * (scales - 32))[:, :, None] * q.reshape(-1, 16, 16)
    return y.reshape(-1)


def dequant_iq4_xs(raw):
    b = _blocks(raw, 136)
    d = _half(b, 0)
    scales_h = b[:, 2:4].copy().view("<u2").astype(np.int64)  # (n, 1)
    scales_l = b[:, 4:8].astype(np.int64)
    ib = np.arange(8)
    ls = ((scales_l[:, ib // 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4)
    codes = _nibbles32(b[:, 8:136].reshape(-1, 16)).reshape(-1, 8, 32)
    y = (d * (ls - 32))[:, :, None] * IQ4_NL_LEVELS[codes]
    return y.reshape(-1)


DEQUANTIZERS = {
    "F32": dequant_f32,
    "F16": dequant_f16,
    "BF16": dequant_bf16,
    "Q8_0": dequant_q8_0,
    "Q4_0": dequant_q4_0,
    "Q4_1": dequant_q4_1,
    "Q5_0": dequant_q5_0,
    "Q5_1": dequant_q5_1,
    "IQ4_NL": dequant_iq4_nl,
    "MXFP4": dequant_mxfp4,
    "Q2_K": dequant_q2_k,
    "Q3_K": dequant_q3_k,
    "Q4_K": dequant_q4_k,
    "Q5_K": dequant_q5_k,
    "Q6_K": dequant_q6_k,
    "IQ4_XS": dequant_iq4_xs,
}


def dequantize(gguf, name):
    """Tensor `name` of an open GGUFFile as a float64 array whose numpy shape is
    the ggml ne reversed (so a {K, N} matrix comes out as N rows of K)."""
    t = gguf.tensors[name]
    fn = DEQUANTIZERS.get(t.type_name)
    if fn is None:
        raise GGUFError(f"tensor {name}: unsupported tensor type {t.type_name} "
                        f"(supported: {', '.join(DEQUANTIZERS)})")
    values = fn(gguf.tensor_bytes(name))
    if values.size != t.n_elements:
        raise GGUFError(f"tensor {name}: dequantized {values.size} values, expected {t.n_elements}")
    return values.reshape(tuple(reversed(t.ne)) if t.ne else ())
