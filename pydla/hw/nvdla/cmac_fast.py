"""CMAC's FP16 MAC cell for many atoms at once, bit for bit as pydla.hw.nvdla.cmac_fp16 (NVIDIA's
``NvdlaMacCell::calculation_fp16``), without evaluating a Booth multiplier for most products.

Why it is exact. The cell's product of a lane is the radix-4 Booth multiplier's two carry-save words
``s`` and ``c``, each shifted right by ``k = 4·(emax - h)`` (h the lane's exponent sum), plus the
sign-compensation constant shifted the same way (rounded up from k = 20). The words satisfy
``s + c + comp ≡ P (mod 2^32)`` for the signed product ``P`` of the two shifted mantissas, so

    booth = floor((P - comp mod 2^k) / 2^k) + [k >= 20] - carry_k,

where ``carry_k`` is the carry out of ``(s mod 2^k) + (c mod 2^k)``. A carry-save adder moves carries
only towards higher bits, so the low k bits of s and c, hence ``carry_k``, depend on the low k bits of
the multiplier's rows only: on ``d mod 2^k``, ``w mod 2^k`` (the Booth digits below bit k) and the
product's sign. Therefore

- k = 0: the product itself; k >= 32: 0 (the cell's own rules);
- k = 4: ``carry_4`` is 0 for every one of the 2^9 cases of (d mod 16, w mod 16, sign) (tested), so the
  product is ``P >> 4``;
- k = 8: ``carry_8`` is looked up in a table of the 2^17 cases (d mod 256, w mod 256, sign), built
  from the Booth multiplier itself;
- k = 12 … 28: the Booth multiplier runs on those lanes only (:func:`booth_lanes`, the reference
  multiplier of pydla.hw.nvdla.cmac_fp16 in uint32 arithmetic).

With FP16 data the first three cover almost every lane (products of values within a factor 2^8 of
the atom's largest; bench_nvdla_blocks' random layer: 96 %). The FP16 convolution of 14x14x64->64 went
from 0.33 s with the Booth multiplier on every lane (in the same vectorised form) to 0.09 s; the slow
lanes' multiplier in uint32 (:func:`booth_lanes`) is 3x the int64 reference's speed.

Usage::

    ops_w = weight_operands(w_bits)            # (K, L) FP16 patterns of one atom
    e, m = mac(data_operands(x_bits), ops_w)   # x_bits (P, L) -> e, m of shape (P, K)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.cmac_fp16 import MAC_NAN, booth, mac_atom
from pydla.hw.nvdla.intmath import I64

I32 = npt.NDArray[np.int32]
DEAD = -64  # the exponent part given to a lane that does not take part: its shift is always >= 32
# compensation bits below the shift (k = 4q), and the rounding up of the shifted constant, per q = k / 4
_COMP_LOW = np.array([0, 0, 0, 0, 0, 0xAAAB0000 % (1 << 20), 0xAAAB0000 % (1 << 24),
                      0xAAAB0000 % (1 << 28), 0], dtype=np.int32)
_ROUND_UP = np.array([0, 0, 0, 0, 0, 1, 1, 1, 0], dtype=np.int32)


@dataclass(frozen=True)
class Operands:
    """One side of the MAC cell's lanes: exponent high part (DEAD for ±0), signed shifted mantissa,
    and the FP16 patterns (for NaNs)."""

    high: npt.NDArray[np.int16]
    mant: I32
    key: I32  # (|mantissa| mod 256) << shift | sign: this side's part of the carry table's index
    bits: I64

    @property
    def has_nan(self) -> bool:
        b = self.bits
        return bool(np.any((((b >> 10) & 31) == 31) & ((b & 0x3FF) != 0)))


def _operands(bits: npt.ArrayLike, shift: int) -> Operands:
    v = np.ascontiguousarray(bits, dtype=np.int64) & 0xFFFF
    e = (v >> 10) & 31
    mts = ((v & 0x3FF) | ((e != 0).astype(np.int64) << 10)) << np.where(e == 0, 1, e & 3)
    live = (v & 0x7FFF) != 0
    high = np.where(live, e >> 2, DEAD).astype(np.int16)
    sign = v >> 15
    mant = np.where(sign == 1, -mts, mts).astype(np.int32)
    key = (((mts & 255) << shift) | sign).astype(np.int32)
    return Operands(high, mant, key, v)


def data_operands(bits: npt.ArrayLike) -> Operands:
    """The data side of (P, L) atoms (P positions, L <= 64 lanes)."""
    return _operands(bits, 1)


def weight_operands(bits: npt.ArrayLike) -> Operands:
    """The weight side of (K, L) atoms (K kernels)."""
    return _operands(bits, 9)


_MAG = np.array([0, 1, 1, 2, 2, 1, 1, 0], dtype=np.uint32)  # a radix-4 Booth code's magnitude
# whether the partial product is negated, by (product negative) * 8 + code: the digit's sign flipped by the
# product's, a zero digit staying positive
_NEGATED = np.array([0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0], dtype=np.uint32)
_COMP = np.array([0xAAAB0000, 0xFAAAB000, 0xFFAAAB00, 0xFFFAAAB0, 0xFFFFAAAB, 0xFFFFFAAB, 0xFFFFFFAB,
                  0xFFFFFFFB], dtype=np.uint32)


def _csa(a: npt.NDArray[np.uint32], b: npt.NDArray[np.uint32], c: npt.NDArray[np.uint32]
         ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    return a ^ b ^ c, ((a & b) | (c & (a | b))) << np.uint32(1)


def booth_lanes(negative: npt.NDArray[np.bool_], wt: npt.NDArray[np.uint32], dat: npt.NDArray[np.uint32],
                k: npt.NDArray[np.int64]) -> I32:
    """pydla.hw.nvdla.cmac_fp16.booth for 1-D lanes with shifts 0 … 28, in uint32 arithmetic (the same
    partial products, carry-save order and compensation)."""
    w2 = wt.astype(np.uint32) << np.uint32(1)
    d = dat.astype(np.uint32)
    sign = negative.astype(np.uint32) << np.uint32(3)
    rows = []
    inv_prev = np.zeros_like(d)
    for i in range(8):
        code = (w2 >> np.uint32(2 * i)) & np.uint32(7)
        neg = np.take(_NEGATED, sign | code)
        prod = d * np.take(_MAG, code)
        pp = (prod ^ (neg * np.uint32(0xFFFF))) | ((np.uint32(1) - neg) << np.uint32(16))
        rows.append((pp << np.uint32(2 * i)) | (inv_prev << np.uint32(max(2 * i - 2, 0))) if i else pp)
        if i == 3:
            rows.append(neg << np.uint32(6))
            inv_prev = np.zeros_like(d)
        else:
            inv_prev = neg
    rows.append(inv_prev << np.uint32(14))
    s, c = _csa(*rows[0:3])
    s, c = _csa(s, c, rows[3])
    s0, c0 = _csa(s, c, rows[4])
    s, c = _csa(*rows[5:8])
    s, c = _csa(s, c, rows[8])
    s1, c1 = _csa(s, c, rows[9])
    s, c = _csa(s0, c0, s1)
    s, c = _csa(s, c, c1)
    shift = k.astype(np.uint32)
    total = (s >> shift) + (c >> shift) + np.take(_COMP, shift >> np.uint32(2))
    out: I32 = total.view(np.int32)
    return out


@functools.cache
def carry8_table() -> npt.NDArray[np.int8]:
    """``carry_8`` for index ``(w mod 256) << 9 | (d mod 256) << 1 | negative``, from the Booth
    multiplier (the identity of the module's description with k = 8)."""
    idx = np.arange(1 << 17, dtype=np.int64)
    w = (idx >> 9).astype(np.uint32)
    d = ((idx >> 1) & 255).astype(np.uint32)
    neg = (idx & 1).astype(bool)
    prod = np.where(neg, -1, 1) * w.astype(np.int64) * d.astype(np.int64)
    got = booth(neg, w, d, np.full(idx.size, 8, dtype=np.int64))
    out: npt.NDArray[np.int8] = ((prod >> 8) - got).astype(np.int8)
    return out


def products(dh: npt.NDArray[np.int16], dm: I32, dkey: I32, wh: npt.NDArray[np.int16], wm: I32, wkey: I32,
             combine: npt.NDArray[np.int64] | None = None) -> tuple[I64, I64]:
    """The atoms' exponents ``4·emax`` and the sums of their lanes' truncated products: data (P, L)
    against weights (K, L), results (P, K); ``dkey``/``wkey`` are the carry table's index parts. With
    ``combine`` (L, J) the lanes are summed with those integer coefficients instead: (P, K, J) (Winograd)."""
    h = np.add(dh[:, None, :], wh[None, :, :], order="C")
    emax = np.maximum(h.max(axis=-1), 0)
    q = emax[..., None] - h  # the shift k = 4q
    top = int(q.max(initial=0))
    shifted = np.multiply(dm[:, None, :], wm[None, :, :], order="C")  # signed products, |P| < 2^28
    if top >= 8:
        shifted *= q < 8  # k >= 32: the product is 0
    shifted >>= np.minimum(q << 2, 28)
    if top >= 2:
        shifted -= np.take(carry8_table(), dkey[:, None, :] ^ wkey[None, :, :]) * (q == 2)
    if top >= 3:
        flat = np.flatnonzero(((q - 3).view(np.uint16) < 5).reshape(-1))  # 12 <= k <= 28
        if flat.size:
            k_n, l_n = wm.shape
            pos, rest = np.divmod(flat, k_n * l_n)
            kern, lane = np.divmod(rest, l_n)
            d_m, w_m = dm[pos, lane], wm[kern, lane]
            k = np.take(q, flat).astype(np.int64) << 2
            np.put(shifted, flat, booth_lanes((d_m ^ w_m) < 0, np.abs(w_m).astype(np.uint32),
                                              np.abs(d_m).astype(np.uint32), k))
    if combine is not None:  # exact in float64: |products| < 2^28, at most 64 lanes of small coefficients
        mixed: I64 = (shifted.astype(np.float64) @ combine.astype(np.float64)).astype(np.int64)
        return (emax.astype(np.int64) << 2), mixed
    total: I64 = shifted.sum(axis=-1, dtype=np.int64)
    return (emax.astype(np.int64) << 2), total


def mac(data: Operands, weights: Operands) -> tuple[I64, I64]:
    """``calculation_fp16`` for data atoms (P, L) against kernels (K, L): exponent and 38-bit mantissa,
    each (P, K)."""
    e, m = products(data.high, data.mant, data.key, weights.high, weights.mant, weights.key)
    if data.has_nan or weights.has_nan:
        ne, nm = mac_atom(data.bits[:, None, :], weights.bits[None])
        nan = ne == MAC_NAN
        e, m = np.where(nan, ne, e), np.where(nan, nm, m)
    return e, m
