#!/usr/bin/python3
"""Checks the vectorized dequantizers of dequant.py against element-by-element
loops that follow the block formulas literally (index arithmetic per element,
as the ggml block layouts define it), on random blocks. Covers the types no
test vector holds (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q5_K, IQ4_NL, MXFP4,
Q2_K, Q3_K, IQ4_XS, and the codebook i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
IQ3_S, IQ1_S, IQ1_M) as well as the others. The i-quants also get one
hand-built block each whose values are written out here, and a few of their
codebook entries (parsed by dequant.py from gguf/tensor/iq_grids.cc) are
compared with ggml's hexadecimal table entries. Exit status 77 when numpy is
missing (the ctest skip code)."""
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


# The codebook i-quants, transcribed from ggml-quants.c's dequantize_row_iq2_xxs
# ... dequantize_row_iq1_m loop by loop. The codebooks are dequant.iq_grid's
# (checked against ggml's hex entries in check_grid_entries).
def u16(b, off):
    return struct.unpack_from("<H", b, off)[0]


def ksigns_iq2xs(i):
    return i | ((bin(i).count("1") & 1) << 7)


def kmask_iq2xs(j):
    return 1 << j


def sgn(signs, j):
    return -1.0 if signs & kmask_iq2xs(j) else 1.0


def s_iq2_xxs(b):
    d, grid, y = half(b, 0), dequant.iq_grid("iq2xxs"), []
    for ib32 in range(8):
        aux8 = b[2 + 8 * ib32:2 + 8 * ib32 + 4]
        aux1 = u32(b, 2 + 8 * ib32 + 4)
        db = d * (0.5 + (aux1 >> 28)) * 0.25
        for l in range(4):
            signs = ksigns_iq2xs((aux1 >> 7 * l) & 127)
            y += [db * grid[aux8[l]][j] * sgn(signs, j) for j in range(8)]
    return y


def s_iq2_xs(b):
    d, grid, y = half(b, 0), dequant.iq_grid("iq2xs"), []
    for ib32 in range(8):
        sc = b[66 + ib32]
        db = [d * (0.5 + (sc & 0xF)) * 0.25, d * (0.5 + (sc >> 4)) * 0.25]
        for l in range(4):
            q = u16(b, 2 + 2 * (4 * ib32 + l))
            signs = ksigns_iq2xs(q >> 9)
            y += [db[l // 2] * grid[q & 511][j] * sgn(signs, j) for j in range(8)]
    return y


def s_iq2_s(b):
    d, grid, y = half(b, 0), dequant.iq_grid("iq2s"), []
    qs, qh, scales = b[2:34], b[66:74], b[74:82]
    signs = b[34:66]
    for ib32 in range(8):
        db = [d * (0.5 + (scales[ib32] & 0xF)) * 0.25, d * (0.5 + (scales[ib32] >> 4)) * 0.25]
        for l in range(4):
            g = grid[qs[4 * ib32 + l] | ((qh[ib32] << (8 - 2 * l)) & 0x300)]
            y += [db[l // 2] * g[j] * sgn(signs[4 * ib32 + l], j) for j in range(8)]
    return y


def s_iq3_xxs(b):
    d, grid, y = half(b, 0), dequant.iq_grid("iq3xxs"), []
    qs = b[2:66]
    for ib32 in range(8):
        aux32 = u32(b, 66 + 4 * ib32)
        db = d * (0.5 + (aux32 >> 28)) * 0.5
        for l in range(4):
            signs = ksigns_iq2xs((aux32 >> 7 * l) & 127)
            g1, g2 = grid[qs[8 * ib32 + 2 * l]], grid[qs[8 * ib32 + 2 * l + 1]]
            out = [0.0] * 8
            for j in range(4):
                out[j] = db * g1[j] * sgn(signs, j)
                out[j + 4] = db * g2[j] * sgn(signs, j + 4)
            y += out
    return y


def s_iq3_s(b):
    d, grid, y = half(b, 0), dequant.iq_grid("iq3s"), []
    qs, qh, signs, scales = b[2:66], b[66:74], b[74:106], b[106:110]
    q, h, s = 0, 0, 0  # running offsets into qs, qh, signs
    for ib32 in range(0, 8, 2):
        for db, hb in ((d * (1 + 2 * (scales[ib32 // 2] & 0xF)), qh[h]),
                       (d * (1 + 2 * (scales[ib32 // 2] >> 4)), qh[h + 1])):
            for l in range(4):
                g1 = grid[qs[q + 2 * l] | ((hb << (8 - 2 * l)) & 256)]
                g2 = grid[qs[q + 2 * l + 1] | ((hb << (7 - 2 * l)) & 256)]
                out = [0.0] * 8
                for j in range(4):
                    out[j] = db * g1[j] * sgn(signs[s + l], j)
                    out[j + 4] = db * g2[j] * sgn(signs[s + l], j + 4)
                y += out
            q += 8
            s += 4
        h += 2
    return y


IQ1S_DELTA = 0.125


def s_iq1_s(b):
    d, grid, y = half(b, 0), dequant.iq_grid("iq1s"), []
    qs = b[2:34]
    for ib in range(8):
        qh = u16(b, 34 + 2 * ib)
        dl = d * (2 * ((qh >> 12) & 7) + 1)
        delta = -IQ1S_DELTA if qh & 0x8000 else IQ1S_DELTA
        for l in range(4):
            g = grid[qs[4 * ib + l] | (((qh >> 3 * l) & 7) << 8)]
            y += [dl * (g[j] + delta) for j in range(8)]
    return y


def s_iq1_m(b):
    grid, y = dequant.iq_grid("iq1s"), []
    qs, qh = b[0:32], b[32:48]
    sc = [u16(b, 48 + 2 * k) for k in range(4)]
    scale = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)
    d = struct.unpack("<e", struct.pack("<H", scale))[0]
    for ib in range(8):
        dl1 = d * (2 * ((sc[ib // 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1)
        dl2 = d * (2 * ((sc[ib // 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1)
        h0, h1 = qh[2 * ib], qh[2 * ib + 1]
        idx = [qs[4 * ib + 0] | ((h0 << 8) & 0x700), qs[4 * ib + 1] | ((h0 << 4) & 0x700),
               qs[4 * ib + 2] | ((h1 << 8) & 0x700), qs[4 * ib + 3] | ((h1 << 4) & 0x700)]
        delta = [-IQ1S_DELTA if h0 & 0x08 else IQ1S_DELTA, -IQ1S_DELTA if h0 & 0x80 else IQ1S_DELTA,
                 -IQ1S_DELTA if h1 & 0x08 else IQ1S_DELTA, -IQ1S_DELTA if h1 & 0x80 else IQ1S_DELTA]
        for l in range(4):
            dl = dl1 if l < 2 else dl2
            y += [dl * (grid[idx[l]][j] + delta[l]) for j in range(8)]
    return y


def set_iq1_m_scale(raw, i, value):
    """Writes binary16 `value` into the top nibbles of block i's four scale words."""
    h = struct.unpack("<H", struct.pack("<e", value))[0]
    for k in range(4):
        off = i * 56 + 48 + 2 * k
        word = (u16(raw, off) & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        struct.pack_into("<H", raw, off, word)


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
    "IQ2_XXS": (66, s_iq2_xxs, [0]),
    "IQ2_XS": (74, s_iq2_xs, [0]),
    "IQ2_S": (82, s_iq2_s, [0]),
    "IQ3_XXS": (98, s_iq3_xxs, [0]),
    "IQ3_S": (110, s_iq3_s, [0]),
    "IQ1_S": (50, s_iq1_s, [0]),
    "IQ1_M": (56, s_iq1_m, []),  # its scale is spread over four words: set_iq1_m_scale
}


def random_blocks(rng, n, size, half_offsets, iq1_m=False):
    raw = bytearray(rng.integers(0, 256, size=n * size, dtype=np.uint8).tobytes())
    for i in range(n):
        for off in half_offsets:  # finite, moderate scales
            struct.pack_into("<e", raw, i * size + off, float(rng.uniform(-0.05, 0.05)))
        if iq1_m:
            set_iq1_m_scale(raw, i, float(rng.uniform(-0.05, 0.05)))
    return bytes(raw)


# Codebook entries as ggml-common.h writes them (uint64 / uint32, value j in
# byte j; iq1s_grid bytes are int8), against dequant.iq_grid's parse.
GGML_GRID_ENTRIES = {
    "iq2xxs": (8, False, {0: 0x0808080808080808, 1: 0x080808080808082b, 100: 0x08192b0808081908,
                          200: 0x192b081908080808}),
    "iq2xs": (8, False, {1: 0x080808080808082b, 300: 0x1908190808191908, 399: 0x192b2b2b192b082b}),
    "iq2s": (8, False, {5: 0x0808080808190819, 600: 0x1908192b08190819, 700: 0x1919082b2b080808,
                        1000: 0x2b2b082b2b082b08}),
    "iq3xxs": (4, False, {0: 0x04040404, 5: 0x04040c3e, 100: 0x14040c1c, 200: 0x2c043e04}),
    "iq3s": (4, False, {0: 0x01010101, 100: 0x010f0101, 300: 0x07030503, 399: 0x090f0701}),
    "iq1s": (8, True, {0: 0xffffffffffffffff, 5: 0xffffffffff00ff00, 1300: 0x000100ff010100ff,
                       1800: 0x010001ffff000100, 2047: 0x0101010101010101}),
}
GRID_SIZES = {"iq2xxs": 256, "iq2xs": 512, "iq2s": 1024, "iq3xxs": 256, "iq3s": 512, "iq1s": 2048}


def check_grid_entries():
    ok = True
    for name, (width, signed, entries) in GGML_GRID_ENTRIES.items():
        grid = dequant.iq_grid(name)
        ok &= grid.shape == (GRID_SIZES[name], width)
        for index, word in entries.items():
            want = [(word >> (8 * j)) & 0xFF for j in range(width)]
            if signed:
                want = [v - 256 if v >= 128 else v for v in want]
            ok &= list(grid[index]) == want
    # The parser refuses an array with the wrong number of entries or a digit
    # beyond the levels.
    for bad in ('constexpr char kX[] =\n    "012" "210";', 'constexpr char kX[] = "013" "210" "000";'):
        try:
            dequant._parse_iq_grid(bad, "kX", 3, 3, (1, 2, 3))
            ok = False
        except dequant.GGUFError:
            pass
    good = dequant._parse_iq_grid('constexpr char kX[] = "012" "210";', "kX", 2, 3, (1, 2, 3))
    ok &= good.tolist() == [[1, 2, 3], [3, 2, 1]]
    return bool(ok)


def hand_blocks():
    """One block per i-quant with a few fields set by hand -> {name: (bytes, expected 256 values)}.
    The codebook entries used are written out from ggml's hex (GGML_GRID_ENTRIES)."""
    out = {}

    # IQ2_XXS, d = 0.5. Group 3 (bytes 26..33): indices [0, 0, 200, 0], then the
    # u32 with scale 9 in bits 28..31 and sign index 1 (bit 0, odd parity -> bit 7
    # too) for entry 2 in bits 14..20. Other groups: all zero -> scale
    # 0.5 * 0.5 / 4 = 0.0625 times grid[0] = 8.
    b = bytearray(66)
    struct.pack_into("<e", b, 0, 0.5)
    b[26:30] = bytes([0, 0, 200, 0])
    struct.pack_into("<I", b, 30, (9 << 28) | (1 << 14))
    want = [0.5] * 256
    want[96:128] = [0.5 * 9.5 * 0.25 * 8] * 32                     # 9.5
    want[112:120] = [1.1875 * v for v in (-8, 8, 8, 8, 25, 8, 43, -25)]
    out["IQ2_XXS"] = (bytes(b), want)

    # IQ2_XS, d = 0.25. qs[4*5 + 3] = 399 | (sign index 3 << 9): values 0, 1
    # negative (even parity). scales[5] = 0x72: entries 0, 1 of group 5 scale
    # 2.5 / 4, entries 2, 3 scale 7.5 / 4.
    b = bytearray(74)
    struct.pack_into("<e", b, 0, 0.25)
    struct.pack_into("<H", b, 2 + 2 * 23, 399 | (3 << 9))
    b[66 + 5] = 0x72
    want = [0.25 * 0.5 * 0.25 * 8] * 256                              # 0.25
    want[160:176] = [0.25 * 2.5 * 0.25 * 8] * 16                      # 1.25
    want[176:184] = [0.25 * 7.5 * 0.25 * 8] * 8                       # 3.75
    want[184:192] = [0.46875 * v for v in (-43, -8, 43, 25, 43, 43, 43, 25)]
    out["IQ2_XS"] = (bytes(b), want)

    # IQ2_S, d = 1. Index 700 = 0x2bc for entry 1 of group 6: qs[25] = 0xbc,
    # qh[6] bits 2..3 = 2; its sign byte signs[25] = 0x90 (values 4, 7);
    # scales[6] = 0x15.
    b = bytearray(82)
    struct.pack_into("<e", b, 0, 1.0)
    b[2 + 25] = 0xBC
    b[66 + 6] = 2 << 2
    b[34 + 25] = 0x90
    b[74 + 6] = 0x15
    want = [0.5 * 0.25 * 8] * 256                                     # 1.0
    want[192:200] = [5.5 * 0.25 * 8] * 8                              # 11
    want[200:208] = [1.375 * v for v in (8, 8, 8, 43, -43, 8, 25, -25)]
    want[208:224] = [1.5 * 0.25 * 8] * 16                             # 3
    out["IQ2_S"] = (bytes(b), want)

    # IQ3_XXS, d = 0.5. Group 2, entry pair 1: qs[18] = 200, qs[19] = 100; the
    # group's u32 (bytes 74..77) has scale 3 and sign index 64 (bit 6, odd
    # parity -> bit 7 too) in bits 7..13.
    b = bytearray(98)
    struct.pack_into("<e", b, 0, 0.5)
    b[2 + 18] = 200
    b[2 + 19] = 100
    struct.pack_into("<I", b, 66 + 8, (3 << 28) | (64 << 7))
    want = [0.5 * 0.5 * 0.5 * 4] * 256                                # 0.5
    want[64:96] = [0.5 * 3.5 * 0.5 * 4] * 32                          # 3.5
    want[72:80] = [0.875 * v for v in (4, 62, 4, 44, 28, 12, -4, -20)]
    out["IQ3_XXS"] = (bytes(b), want)

    # IQ3_S, d = 0.25. Group 3, pair 2: qs[28] = 300 & 255 with qh[3] bit 4 set
    # (index 300), qs[29] = 100 with bit 5 clear; signs[14] = 0x21 (values 0, 5);
    # scales[1] = 0x60: group 3 scale 1 + 2*6 = 13, group 2 scale 1.
    b = bytearray(110)
    struct.pack_into("<e", b, 0, 0.25)
    b[2 + 28] = 300 & 255
    b[2 + 29] = 100
    b[66 + 3] = 0x10
    b[74 + 14] = 0x21
    b[106 + 1] = 0x60
    want = [0.25] * 256
    want[96:128] = [3.25] * 32
    want[112:120] = [3.25 * v for v in (-3, 5, 3, 7, 1, -1, 15, 1)]
    out["IQ3_S"] = (bytes(b), want)

    # IQ1_S, d = 0.5. Group 4, entry 1: qs[17] = 1800 & 255 with bits 3..5 of
    # qh[4] = 7; qh[4] bits 12..14 = 5 (scale 11), bit 15 (delta -1/8).
    b = bytearray(50)
    struct.pack_into("<e", b, 0, 0.5)
    b[2 + 17] = 1800 & 255
    struct.pack_into("<H", b, 34 + 8, 0x8000 | (5 << 12) | (7 << 3))
    want = [0.5 * (-1 + 0.125)] * 256                                 # -0.4375
    want[128:160] = [5.5 * (-1 - 0.125)] * 32
    want[136:144] = [5.5 * (v - 0.125) for v in (0, 1, 0, -1, -1, 1, 0, 1)]
    out["IQ1_S"] = (bytes(b), want)

    # IQ1_M, block scale 0.5 = 0x3800: top nibbles 0, 0, 8, 3 of the four
    # words. Group 5, entry 3: qs[23] = 1300 & 255, high nibble of qh[11] = 0xd
    # (index bits 5, delta -1/8). Word 2 bits 6..8 = 2 (values 160..175 scale 5)
    # and bits 9..11 = 6 (values 176..191 scale 13).
    b = bytearray(56)
    b[23] = 1300 & 255
    b[32 + 11] = 0xD0
    struct.pack_into("<4H", b, 48, 0, 0, 0x8000 | (6 << 9) | (2 << 6), 0x3000)
    want = [0.5 * (-1 + 0.125)] * 256                                 # -0.4375
    want[160:176] = [2.5 * (-1 + 0.125)] * 16
    want[176:184] = [6.5 * (-1 + 0.125)] * 8
    want[184:192] = [6.5 * (v - 0.125) for v in (-1, 0, 1, 1, -1, 0, 1, 0)]
    out["IQ1_M"] = (bytes(b), want)
    return out


def main():
    rng = np.random.default_rng(20240601)
    failures = 0
    for name, (size, scalar, halves) in SCALAR.items():
        raw = random_blocks(rng, 6, size, halves, iq1_m=name == "IQ1_M")
        want = np.array([v for i in range(6) for v in scalar(raw[i * size:(i + 1) * size])])
        got = dequant.DEQUANTIZERS[name](raw)
        err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
        ok = err == 0.0
        failures += not ok
        print(f"{name:7s} {got.size:5d} values  max |vectorized - scalar| {err:.3e}  {'ok' if ok else 'FAILED'}")

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

    hand = hand_blocks()
    for name, (raw, want) in hand.items():
        got = dequant.DEQUANTIZERS[name](raw)
        good = np.array_equal(got, np.array(want, dtype=np.float64))
        good_scalar = np.array_equal(np.array(SCALAR[name][1](raw)), np.array(want, dtype=np.float64))
        failures += not (good and good_scalar)
        print(f"{name:7s}  hand-built block  vectorized {'ok' if good else 'FAILED'}  "
              f"scalar {'ok' if good_scalar else 'FAILED'}")

    good = check_grid_entries()
    failures += not good
    print(f"codebooks against ggml's entries  {'ok' if good else 'FAILED'}")

    total = len(SCALAR) + 3 + len(hand) + 1
    print(f"{total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
