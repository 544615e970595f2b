"""Dequantizers for the ggml tensor types, written from the block layouts
(ggml-common.h / ggml-quants.c), vectorized with numpy. Every function takes
the raw bytes of a tensor and returns a flat float64 array of its elements in
storage order (ne[0] fastest)."""
import os
import re

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


# The i-quant codebooks (ggml-common.h: iq2xxs_grid, iq2xs_grid, iq2s_grid,
# iq3xxs_grid, iq3s_grid, iq1s_grid) are read from the C++ tree's
# gguf/tensor/iq_grids.cc, where each is a char array of quoted entries, one
# digit per value, each digit an index into the type's levels. Digit j of
# entry i is value j (byte j of ggml's uint64 / uint32 entry) of entry i.
IQ_GRIDS_CC = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "..", "..", "gguf", "tensor", "iq_grids.cc")
# name -> (array in iq_grids.cc, entries, values per entry, levels)
_IQ_GRID_SPECS = {
    "iq2xxs": ("kIq2XxsDigits", 256, 8, (8, 25, 43)),
    "iq2xs": ("kIq2XsDigits", 512, 8, (8, 25, 43)),
    "iq2s": ("kIq2SDigits", 1024, 8, (8, 25, 43)),
    "iq3xxs": ("kIq3XxsDigits", 256, 4, (4, 12, 20, 28, 36, 44, 52, 62)),
    "iq3s": ("kIq3SDigits", 512, 4, (1, 3, 5, 7, 9, 11, 13, 15)),
    "iq1s": ("kIq1SDigits", 2048, 8, (-1, 0, 1)),
}
_iq_grids = {}


def _parse_iq_grid(source, array, entries, width, levels):
    m = re.search(r"\b" + array + r"\s*\[\s*\]\s*=([^;]*);", source)
    if m is None:
        raise GGUFError(f"{IQ_GRIDS_CC}: no array {array}")
    strings = re.findall(r'"([^"]*)"', m.group(1))
    if len(strings) != entries:
        raise GGUFError(f"{IQ_GRIDS_CC}: {array} has {len(strings)} entries, expected {entries}")
    for i, s in enumerate(strings):
        if len(s) != width or any(c not in "0123456789"[:len(levels)] for c in s):
            raise GGUFError(f"{IQ_GRIDS_CC}: {array} entry {i} is {s!r}, expected {width} digits "
                            f"below {len(levels)}")
    digits = np.frombuffer("".join(strings).encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("0")
    return np.array(levels, dtype=np.float64)[digits].reshape(entries, width)


def iq_grid(name):
    """Codebook `name` (a key of _IQ_GRID_SPECS) as an (entries, width)
    float64 array, parsed from iq_grids.cc on first use."""
    if not _iq_grids:
        try:
            with open(IQ_GRIDS_CC, encoding="utf-8") as f:
                source = f.read()
        except OSError as e:
            raise GGUFError(f"cannot read the i-quant codebooks: {e}") from e
        _iq_grids.update({key: _parse_iq_grid(source, *spec) for key, spec in _IQ_GRID_SPECS.items()})
    return _iq_grids[name]


def _sign_bits(byte):
    """Sign bytes (any shape, int64) -> (..., 8) of +-1.0: bit j set makes value j negative."""
    return 1.0 - 2.0 * ((byte[..., None] >> np.arange(8)) & 1)


# ggml's ksigns_iq2xs: the 7 stored sign bits with an 8th that makes the
# number of negative values even.
KSIGNS_IQ2XS = np.array([i | ((bin(i).count("1") & 1) << 7) for i in range(128)], dtype=np.int64)
IQ1S_DELTA = 0.125


def dequant_iq2_xxs(raw):
    b = _blocks(raw, 66)
    d = _half(b, 0)[:, :, None]                                   # (n, 1, 1)
    q = b[:, 2:66].reshape(-1, 8, 8)                              # 8 groups of 32 values
    idx = q[:, :, 0:4].astype(np.int64)                           # (n, 8, 4) grid indices
    aux = q[:, :, 4:8].copy().view("<u4").astype(np.int64)        # (n, 8, 1)
    db = d * (0.5 + (aux >> 28)) * 0.25
    signs = _sign_bits(KSIGNS_IQ2XS[(aux >> (7 * np.arange(4))) & 127])  # (n, 8, 4, 8)
    y = db[..., None] * iq_grid("iq2xxs")[idx] * signs
    return y.reshape(-1)


def _iq2_scales(sc):
    """scales (n, 8) -> (n, 8, 4): the low nibble scales the first 16 values of
    each group of 32, the high nibble the last 16; (0.5 + s) / 4."""
    s = sc.astype(np.int64)
    s2 = np.stack([s & 0x0F, s >> 4], axis=2)                     # (n, 8, 2)
    return (0.5 + s2[:, :, [0, 0, 1, 1]]) * 0.25


def dequant_iq2_xs(raw):
    b = _blocks(raw, 74)
    d = _half(b, 0)[:, :, None]
    qs = b[:, 2:66].copy().view("<u2").astype(np.int64).reshape(-1, 8, 4)
    db = d * _iq2_scales(b[:, 66:74])                              # (n, 8, 4)
    y = db[..., None] * iq_grid("iq2xs")[qs & 511] * _sign_bits(KSIGNS_IQ2XS[qs >> 9])
    return y.reshape(-1)


def dequant_iq2_s(raw):
    b = _blocks(raw, 82)
    d = _half(b, 0)[:, :, None]
    lo = b[:, 2:34].astype(np.int64).reshape(-1, 8, 4)
    signs = b[:, 34:66].astype(np.int64).reshape(-1, 8, 4)
    qh = b[:, 66:74].astype(np.int64)                              # (n, 8): bits 2l..2l+1 for index l
    idx = lo | (((qh[:, :, None] >> (2 * np.arange(4))) & 3) << 8)
    db = d * _iq2_scales(b[:, 74:82])
    y = db[..., None] * iq_grid("iq2s")[idx] * _sign_bits(signs)
    return y.reshape(-1)


def dequant_iq3_xxs(raw):
    b = _blocks(raw, 98)
    d = _half(b, 0)[:, :, None]
    idx = b[:, 2:66].astype(np.int64).reshape(-1, 8, 8)          # 8 indices of 4 values per group
    aux = b[:, 66:98].copy().view("<u4").astype(np.int64)[:, :, None]  # (n, 8, 1)
    db = d * (0.5 + (aux >> 28)) * 0.5
    signs = _sign_bits(KSIGNS_IQ2XS[(aux >> (7 * np.arange(4))) & 127]).reshape(-1, 8, 32)
    y = db * iq_grid("iq3xxs")[idx].reshape(-1, 8, 32) * signs
    return y.reshape(-1)


def dequant_iq3_s(raw):
    b = _blocks(raw, 110)
    d = _half(b, 0)
    qs = b[:, 2:66].astype(np.int64).reshape(-1, 8, 8)
    qh = b[:, 66:74].astype(np.int64)                              # (n, 8): bit k is index k's 9th bit
    signs = _sign_bits(b[:, 74:106].astype(np.int64)).reshape(-1, 8, 32)
    sc = b[:, 106:110].astype(np.int64)
    s = np.stack([sc & 0x0F, sc >> 4], axis=2).reshape(-1, 8)    # group 2k: low nibble of byte k
    idx = qs | (((qh[:, :, None] >> np.arange(8)) & 1) << 8)
    db = (d * (1 + 2 * s))[:, :, None]
    y = db * iq_grid("iq3s")[idx].reshape(-1, 8, 32) * signs
    return y.reshape(-1)


def dequant_iq1_s(raw):
    b = _blocks(raw, 50)
    d = _half(b, 0)
    qs = b[:, 2:34].astype(np.int64).reshape(-1, 8, 4)
    qh = b[:, 34:50].copy().view("<u2").astype(np.int64)          # (n, 8)
    idx = qs | (((qh[:, :, None] >> (3 * np.arange(4))) & 7) << 8)
    dl = d * (2 * ((qh >> 12) & 7) + 1)
    delta = np.where(qh & 0x8000, -IQ1S_DELTA, IQ1S_DELTA)
    y = dl[:, :, None, None] * (iq_grid("iq1s")[idx] + delta[:, :, None, None])
    return y.reshape(-1)


def dequant_iq1_m(raw):
    b = _blocks(raw, 56)
    qs = b[:, 0:32].astype(np.int64).reshape(-1, 8, 4)
    qh = b[:, 32:48].astype(np.int64).reshape(-1, 8, 2)
    sc = b[:, 48:56].copy().view("<u2").astype(np.int64)          # (n, 4)
    # The block scale is a binary16 made of the top nibbles of the four words.
    u16 = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = u16.astype("<u2").view("<f2").astype(np.float64)[:, None]  # (n, 1)
    # Index l of group ib takes nibble l % 2 of qh[2 ib + l // 2]: bits 0..2
    # are its 9th..11th bits, bit 3 the sign of its delta.
    nib = np.stack([qh & 0x0F, qh >> 4], axis=3).reshape(-1, 8, 4)
    idx = qs | ((nib & 7) << 8)
    delta = np.where(nib & 8, -IQ1S_DELTA, IQ1S_DELTA)
    # Sixteen 3-bit scales, one per 16 values: scale g is bits 3(g%4).. of word g//4.
    g = np.arange(16)
    s = (sc[:, g // 4] >> (3 * (g % 4))) & 7                        # (n, 16)
    dl = (d * (2 * s + 1)).reshape(-1, 8, 2)[:, :, [0, 0, 1, 1]]   # (n, 8, 4)
    y = dl[..., None] * (iq_grid("iq1s")[idx] + delta[..., None])
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
    "IQ2_XXS": dequant_iq2_xxs,
    "IQ2_XS": dequant_iq2_xs,
    "IQ2_S": dequant_iq2_s,
    "IQ3_XXS": dequant_iq3_xxs,
    "IQ3_S": dequant_iq3_s,
    "IQ1_S": dequant_iq1_s,
    "IQ1_M": dequant_iq1_m,
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
