#!/usr/bin/python3
"""Checks the vectorized dequantizers of dequant.py against element-by-element
loops that follow the block formulas literally (index arithmetic per element,
as the ggml block layouts define it), on random blocks. Covers the types no
test vector holds (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q5_K, IQ4_NL, MXFP4,
Q2_K, Q3_K, IQ4_XS) as well as the others. Exit status 77 when numpy is missing (the ctest skip code)."""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed for this python3", file=sys.stderr)
    sys.exit(77)

import dequant  # noqa: E402


def half(b, off):
    return struct.unpack_from("<e", b, off)[0]


def u32(b, off):
    return struct.unpack_from("<I", b, off)[0]


def i8(v):
    return v - 256 if v >= 128 else v


def scale_min_k4(j, s):
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def nib(qs, e):
    return qs[e] & 0x0F if e < 16 else qs[e - 16] >> 4


# One scalar function per type: (block bytes) -> list of element values.
def s_q8_0(b):
    return [half(b, 0) * i8(b[2 + e]) for e in range(32)]


def s_q4_0(b):
    return [half(b, 0) * (nib(b[2:18], e) - 8) for e in range(32)]


def s_q4_1(b):
    return [half(b, 0) * nib(b[4:20], e) + half(b, 2) for e in range(32)]


def s_q5_0(b):
    qh = u32(b, 2)
    return [half(b, 0) * ((nib(b[6:22], e) | (((qh >> e) & 1) << 4)) - 16) for e in range(32)]


def s_q5_1(b):
    qh = u32(b, 4)
    return [half(b, 0) * (nib(b[8:24], e) | (((qh >> e) & 1) << 4)) + half(b, 2) for e in range(32)]


def s_q4_k(b):
    d, dmin, s, qs = half(b, 0), half(b, 2), b[4:16], b[16:144]
    out = []
    for e in range(256):
        c, hf, l = e // 64, (e % 64) // 32, e % 32
        q = qs[32 * c + l] >> 4 if hf else qs[32 * c + l] & 0x0F
        sc, m = scale_min_k4(e // 32, s)
        out.append(d * sc * q - dmin * m)
    return out


def s_q5_k(b):
    d, dmin, s, qh, qs = half(b, 0), half(b, 2), b[4:16], b[16:48], b[48:176]
    out = []
    for e in range(256):
        c, hf, l = e // 64, (e % 64) // 32, e % 32
        q = qs[32 * c + l] >> 4 if hf else qs[32 * c + l] & 0x0F
        q += 16 * ((qh[l] >> (2 * c + hf)) & 1)
        sc, m = scale_min_k4(e // 32, s)
        out.append(d * sc * q - dmin * m)
    return out


def s_q6_k(b):
    ql, qh, sc, d = b[0:128], b[128:192], b[192:208], half(b, 208)
    out = []
    for e in range(256):
        h, m, l = e // 128, (e % 128) // 32, e % 32
        byte = ql[64 * h + 32 * (m & 1) + l]
        lo = byte & 0x0F if m < 2 else byte >> 4
        hi = (qh[32 * h + l] >> (2 * m)) & 3
        out.append(d * i8(sc[e // 16]) * ((lo | (hi << 4)) - 32))
    return out


IQ4 = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
MX = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def s_iq4_nl(b):
    return [half(b, 0) * IQ4[nib(b[2:18], e)] for e in range(32)]


def s_mxfp4(b):
    return [MX[nib(b[1:17], e)] * 2.0 ** (b[0] - 128) for e in range(32)]


def low2(qs, e):
    h, j, l = e // 128, (e % 128) // 32, e % 32
    return (qs[32 * h + l] >> (2 * j)) & 3


def s_q2_k(b):
    sc, qs, d, dmin = b[0:16], b[16:80], half(b, 80), half(b, 82)
    return [d * (sc[e // 16] & 0x0F) * low2(qs, e) - dmin * (sc[e // 16] >> 4) for e in range(256)]


def q3_scale(s, i):
    k, row = i % 4, i // 4
    low = [s[k] & 0x0F, s[4 + k] & 0x0F, s[k] >> 4, s[4 + k] >> 4][row]
    return low | (((s[8 + k] >> (2 * row)) & 3) << 4)


def s_q3_k(b):
    hmask, qs, s, d = b[0:32], b[32:96], b[96:108], half(b, 108)
    out = []
    for e in range(256):
        h, j, l = e // 128, (e % 128) // 32, e % 32
        hb = (hmask[l] >> (4 * h + j)) & 1
        out.append(d * (q3_scale(s, e // 16) - 32) * (low2(qs, e) - (0 if hb else 4)))
    return out


def s_iq4_xs(b):
    d, sh, sl = half(b, 0), struct.unpack_from("<H", b, 2)[0], b[4:8]
    out = []
    for e in range(256):
        ib = e // 32
        ls = ((sl[ib // 2] >> (4 * (ib % 2))) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4)
        out.append(d * (ls - 32) * IQ4[nib(b[8 + 16 * ib:24 + 16 * ib], e % 32)])
    return out


SCALAR = {
    "Q8_0": (34, s_q8_0, [0]),
    "Q4_0": (18, s_q4_0, [0]),
    "Q4_1": (20, s_q4_1, [0, 2]),
    "Q5_0": (22, s_q5_0, [0]),
    "Q5_1": (24, s_q5_1, [0, 2]),
    "Q4_K": (144, s_q4_k, [0, 2]),
    "Q5_K": (176, s_q5_k, [0, 2]),
    "Q6_K": (210, s_q6_k, [208]),
    "IQ4_NL": (18, s_iq4_nl, [0]),
    "MXFP4": (17, s_mxfp4, []),
    "Q2_K": (84, s_q2_k, [80, 82]),
    "Q3_K": (110, s_q3_k, [108]),
    "IQ4_XS": (136, s_iq4_xs, [0]),
}


def random_blocks(rng, n, size, half_offsets):
    raw = bytearray(rng.integers(0, 256, size=n * size, dtype=np.uint8).tobytes())
    for i in range(n):
        for off in half_offsets:  # finite, moderate scales
            struct.pack_into("<e", raw, i * size + off, float(rng.uniform(-0.05, 0.05)))
    return bytes(raw)


def main():
    rng = np.random.default_rng(20240601)
    failures = 0
    for name, (size, scalar, halves) in SCALAR.items():
        raw = random_blocks(rng, 6, size, halves)
        want = np.array([v for i in range(6) for v in scalar(raw[i * size:(i + 1) * size])])
        got = dequant.DEQUANTIZERS[name](raw)
        err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
        ok = err == 0.0
        failures += not ok
        print(f"{name:6s} {got.size:5d} values  max |vectorized - scalar| {err:.3e}  {'ok' if ok else 'FAILED'}")

    values = rng.standard_normal(64).astype(np.float32)
    f16 = values.astype("<f2")
    ok = np.array_equal(dequant.DEQUANTIZERS["F16"](f16.tobytes()), f16.astype(np.float64))
    bf16 = (values.view(np.uint32) >> 16).astype("<u2")
    want = [struct.unpack("<f", struct.pack("<I", int(v) << 16))[0] for v in bf16]
    ok_bf = np.array_equal(dequant.DEQUANTIZERS["BF16"](bf16.tobytes()), np.array(want))
    ok_f32 = np.array_equal(dequant.DEQUANTIZERS["F32"](values.astype("<f4").tobytes()), values.astype(np.float64))
    for name, good in (("F16", ok), ("BF16", ok_bf), ("F32", ok_f32)):
        failures += not good
        print(f"{name:5s}    64 values  {'ok' if good else 'FAILED'}")

    total = len(SCALAR) + 3
    print(f"{total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
