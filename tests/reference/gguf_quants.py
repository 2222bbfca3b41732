#!/usr/bin/env python3
"""Dequantisation of GGUF tensor data in numpy, an independent reference for strata's.

Written from the published block layouts (GGML's ggml-common.h and the dequantisers of
ggml-quants.c), in float64, sharing no code with strata. Each element is computed from its
block's fields as the format defines it; every product of the fields is exact in float64 and
the one addition (of a min) rounds once, so the values rounded to float32 are the float32
values a correct float32 dequantiser produces (barring a double rounding when a min and a
scale differ by more than 2^29, which no real block does).

usage: gguf_quants.py check DIR
  DIR/index.txt lists "NAME TYPE_ID N_ELEMENTS" per line; DIR/NAME.q holds the raw blocks and
  DIR/NAME.f32 another implementation's dequantised float32 values. Exits 1 unless every
  value is the same float32, bit for bit.
"""
import os
import sys

import numpy as np

# The 16 levels of IQ4_NL and IQ4_XS.
IQ4_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                    dtype=np.float64)

# The 16 E2M1 values of MXFP4 (OCP MX spec: sign bit, 2 exponent bits of bias 1, 1 mantissa bit;
# exponent 0 is subnormal), from the bits.
def _e2m1(code):
    exp, man = (code >> 1) & 3, code & 1
    mag = 0.5 * man if exp == 0 else (1.0 + 0.5 * man) * 2.0 ** (exp - 1)
    return -mag if code & 8 else mag


# GGML keeps them doubled, as integers (kvalues_mxfp4): code 8, -0, dequantises to +0.
E2M1 = np.array([_e2m1(c) for c in range(16)], dtype=np.float64) + 0.0


def _f16(b, off):
    """Column of f16 fields at byte offset `off` of each block (rows of b), as float64."""
    return b[:, off:off + 2].copy().view("<f2")[:, 0].astype(np.float64)


def _u16(b, off):
    return b[:, off:off + 2].copy().view("<u2")[:, 0].astype(np.int64)


def _u32(b, off):
    return b[:, off:off + 4].copy().view("<u4")[:, 0].astype(np.int64)


def _nibbles(qs):
    """[nb, 16] bytes -> [nb, 32] quants: low nibbles are elements 0..15, high ones 16..31."""
    q = qs.astype(np.int64)
    return np.concatenate([q & 15, q >> 4], axis=1)


def _bits32(qh):
    """[nb] uint32 -> [nb, 32]: bit j of each word."""
    return (qh[:, None] >> np.arange(32)) & 1


def _two_bits(qs):
    """[nb, 64] bytes of Q2_K / Q3_K -> [nb, 256]: element 128h + 32j + l is bits 2j..2j+1 of
    byte 32h + l."""
    q = qs.astype(np.int64).reshape(-1, 2, 1, 32)  # [nb, h, 1, l]
    shifts = (2 * np.arange(4)).reshape(1, 1, 4, 1)  # j
    return ((q >> shifts) & 3).reshape(-1, 256)


def _k_scale_min(sc):
    """[nb, 12] packed 6-bit scales and mins of Q4_K / Q5_K -> two [nb, 8] arrays."""
    s = sc.astype(np.int64)
    scale = np.empty((s.shape[0], 8), dtype=np.int64)
    mn = np.empty((s.shape[0], 8), dtype=np.int64)
    for j in range(8):
        if j < 4:
            scale[:, j] = s[:, j] & 63
            mn[:, j] = s[:, j + 4] & 63
        else:
            scale[:, j] = (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return scale, mn


def _per(values, width):
    """Repeats each of [nb, m] values over `width` consecutive elements."""
    return np.repeat(values, width, axis=1)


def deq_f32(b):
    return b.copy().view("<f4").astype(np.float64)


def deq_f16(b):
    return b.copy().view("<f2").astype(np.float64)


def deq_bf16(b):
    return (b.copy().view("<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)


def deq_q4_0(b):  # d f16, qs[16]
    return (_nibbles(b[:, 2:18]) - 8) * _f16(b, 0)[:, None]


def deq_q4_1(b):  # d f16, m f16, qs[16]
    return _nibbles(b[:, 4:20]) * _f16(b, 0)[:, None] + _f16(b, 2)[:, None]


def deq_q5_0(b):  # d f16, qh[4], qs[16]
    q = _nibbles(b[:, 6:22]) | (_bits32(_u32(b, 2)) << 4)
    return (q - 16) * _f16(b, 0)[:, None]


def deq_q5_1(b):  # d f16, m f16, qh[4], qs[16]
    q = _nibbles(b[:, 8:24]) | (_bits32(_u32(b, 4)) << 4)
    return q * _f16(b, 0)[:, None] + _f16(b, 2)[:, None]


def deq_q8_0(b):  # d f16, qs[32] int8
    return b[:, 2:34].copy().view(np.int8).astype(np.float64) * _f16(b, 0)[:, None]


def deq_q8_1(b):  # d f16, s f16 (d * sum, not needed for the values), qs[32] int8
    return b[:, 4:36].copy().view(np.int8).astype(np.float64) * _f16(b, 0)[:, None]


def deq_iq4_nl(b):  # d f16, qs[16]
    return IQ4_GRID[_nibbles(b[:, 2:18])] * _f16(b, 0)[:, None]


def deq_mxfp4(b):  # e u8 (E8M0 exponent: scale 2^(e - 127)), qs[16] E2M1 codes as Q4_0's nibbles
    scale = np.ldexp(1.0, b[:, 0].astype(np.int64) - 127)
    return E2M1[_nibbles(b[:, 1:17])] * scale[:, None]


def deq_q2_k(b):  # scales[16] (scale | min << 4), qs[64], d f16, dmin f16
    sc = b[:, 0:16].astype(np.int64)
    q = _two_bits(b[:, 16:80])
    d, dmin = _f16(b, 80)[:, None], _f16(b, 82)[:, None]
    return d * _per(sc & 15, 16) * q - dmin * _per(sc >> 4, 16)


def deq_q3_k(b):  # hmask[32], qs[64], scales[12], d f16
    hmask = b[:, 0:32].astype(np.int64)
    # Bit 2 of element e = 128h + 32j + l is bit 4h + j (= e // 32) of hmask[l].
    high = (hmask[:, None, :] >> np.arange(8)[None, :, None]) & 1  # [nb, e // 32, l]
    q = _two_bits(b[:, 32:96]) | (high.reshape(-1, 256) << 2)
    s = b[:, 96:108].astype(np.int64)
    scale = np.empty((b.shape[0], 16), dtype=np.int64)
    for i in range(16):
        low = (s[:, i] & 15) if i < 8 else (s[:, i - 8] >> 4)
        scale[:, i] = low | (((s[:, 8 + i % 4] >> (2 * (i // 4))) & 3) << 4)
    return _f16(b, 108)[:, None] * _per(scale - 32, 16) * (q - 4)


def _q4_k_quants(qs):
    """[nb, 128] -> [nb, 256]: chunk c of 64 elements is bytes 32c..32c+32, low nibbles first."""
    q = qs.astype(np.int64).reshape(-1, 4, 1, 32)
    return ((q >> np.array([0, 4]).reshape(1, 1, 2, 1)) & 15).reshape(-1, 256)


def deq_q4_k(b):  # d f16, dmin f16, scales[12], qs[128]
    scale, mn = _k_scale_min(b[:, 4:16])
    q = _q4_k_quants(b[:, 16:144])
    return _f16(b, 0)[:, None] * _per(scale, 32) * q - _f16(b, 2)[:, None] * _per(mn, 32)


def deq_q5_k(b):  # d f16, dmin f16, scales[12], qh[32], qs[128]
    scale, mn = _k_scale_min(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int64)
    high = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1  # bit e // 32 of qh[e % 32]
    q = _q4_k_quants(b[:, 48:176]) | (high.reshape(-1, 256) << 4)
    return _f16(b, 0)[:, None] * _per(scale, 32) * q - _f16(b, 2)[:, None] * _per(mn, 32)


def deq_q6_k(b):  # ql[128], qh[64], scales[16] int8, d f16
    ql = b[:, 0:128].astype(np.int64).reshape(-1, 2, 2, 32)  # [nb, h, half of the 64, l]
    qh = b[:, 128:192].astype(np.int64).reshape(-1, 2, 1, 32)  # [nb, h, 1, l]
    # Element 128h + 32g + l: low 4 bits from ql[64h + 32(g % 2) + l] (low nibble for g < 2),
    # high 2 bits from bits 2g of qh[32h + l].
    low = np.concatenate([ql & 15, ql >> 4], axis=2)  # g = 0, 1 (low nibbles), 2, 3 (high)
    high = (qh >> (2 * np.arange(4)).reshape(1, 1, 4, 1)) & 3
    q = (low | (high << 4)).reshape(-1, 256)
    sc = b[:, 192:208].copy().view(np.int8).astype(np.int64)
    return _f16(b, 208)[:, None] * _per(sc, 16) * (q - 32)


def deq_q8_k(b):  # d f32, qs[256] int8, bsums[16] int16
    d = b[:, 0:4].copy().view("<f4")[:, 0].astype(np.float64)
    return b[:, 4:260].copy().view(np.int8).astype(np.float64) * d[:, None]


def deq_iq4_xs(b):  # d f16, scales_h u16, scales_l[4], qs[128]
    sh = _u16(b, 2)
    sl = b[:, 4:8].astype(np.int64)
    ls = np.empty((b.shape[0], 8), dtype=np.int64)
    for i in range(8):
        ls[:, i] = ((sl[:, i // 2] >> (4 * (i % 2))) & 15) | (((sh >> (2 * i)) & 3) << 4)
    q = _nibbles(b[:, 8:136].reshape(-1, 16)).reshape(-1, 256)  # each sub-block as IQ4_NL
    return _f16(b, 0)[:, None] * _per(ls - 32, 32) * IQ4_GRID[q]


# GGML type id: (name, elements per block, bytes per block, dequantiser of [nb, bytes] blocks).
TYPES = {
    0: ("f32", 1, 4, deq_f32),
    1: ("f16", 1, 2, deq_f16),
    2: ("q4_0", 32, 18, deq_q4_0),
    3: ("q4_1", 32, 20, deq_q4_1),
    6: ("q5_0", 32, 22, deq_q5_0),
    7: ("q5_1", 32, 24, deq_q5_1),
    8: ("q8_0", 32, 34, deq_q8_0),
    9: ("q8_1", 32, 36, deq_q8_1),
    10: ("q2_K", 256, 84, deq_q2_k),
    11: ("q3_K", 256, 110, deq_q3_k),
    12: ("q4_K", 256, 144, deq_q4_k),
    13: ("q5_K", 256, 176, deq_q5_k),
    14: ("q6_K", 256, 210, deq_q6_k),
    15: ("q8_K", 256, 292, deq_q8_k),
    20: ("iq4_nl", 32, 18, deq_iq4_nl),
    23: ("iq4_xs", 256, 136, deq_iq4_xs),
    30: ("bf16", 1, 2, deq_bf16),
    39: ("mxfp4", 32, 17, deq_mxfp4),
}


def type_name(type_id):
    return TYPES[type_id][0] if type_id in TYPES else "type %d" % type_id


def nbytes(type_id, n):
    """Bytes of n elements of the type (n a multiple of its block size)."""
    _, bs, size, _ = TYPES[type_id]
    if n % bs:
        raise ValueError("%d elements are not whole %s blocks" % (n, type_name(type_id)))
    return n // bs * size


def dequantize(type_id, data, n):
    """float64 array of the n elements whose blocks start at data (bytes-like or uint8)."""
    if type_id not in TYPES:
        raise ValueError("no dequantiser for GGML type %d" % type_id)
    _, bs, size, fn = TYPES[type_id]
    raw = np.frombuffer(data, dtype=np.uint8, count=nbytes(type_id, n))
    return fn(raw.reshape(n // bs, size)).reshape(n)


def check(folder):
    bad = 0
    with open(os.path.join(folder, "index.txt")) as f:
        entries = [line.split() for line in f if line.strip()]
    for name, type_id, n in entries:
        type_id, n = int(type_id), int(n)
        with open(os.path.join(folder, name + ".q"), "rb") as f:
            ours = dequantize(type_id, f.read(), n).astype(np.float32)
        theirs = np.fromfile(os.path.join(folder, name + ".f32"), dtype="<f4")
        if theirs.size != n:
            bad += 1
            print("%s: %d values expected, %d given" % (name, n, theirs.size))
            continue
        diff = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
        if diff.size:
            bad += 1
            i = diff[0]
            print("%s (%s): %d of %d values differ, first at %d: %r vs %r" %
                  (name, type_name(type_id), diff.size, n, i, ours[i], theirs[i]))
        else:
            print("%s (%s): %d values equal" % (name, type_name(type_id), n))
    return 1 if bad else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "check":
        print(__doc__)
        return 2
    return check(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
