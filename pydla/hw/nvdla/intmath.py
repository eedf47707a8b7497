"""NVDLA's integer primitives, vectorised: rounding shifts, saturation and wrap-around.

NVIDIA's C model computes with fixed-width integers whose rounding mode is "round half away from
zero" and whose overflow mode is saturation (``ac_fixed<..., AC_RND_INF, AC_SAT>`` in
``cmod/hls/include/nvdla_common.h``), except where a value is merely assigned to a narrower type,
which keeps the low bits. These helpers reproduce the three behaviours on int64 numpy arrays (and
on Python ints), so that every block states its widths once and computes without per-element
loops. Values must stay within ±2**62 (every NVDLA intermediate that reaches a rounding shift
does); wider intermediates are clipped by the callers first where the hardware saturates anyway.

Usage::

    shift_right_round(np.array([5, -5, 6, -6]), 2)   # [1, -1, 2, -2]  (1.25, -1.25, 1.5, -1.5)
    saturate(np.array([200, -200]), 8)               # [127, -128]
    wrap(np.array([200]), 8)                         # [-56]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def _as_i64(x: npt.ArrayLike) -> I64:
    return np.asarray(x, dtype=np.int64)


def shift_right_round(x: npt.ArrayLike, shift: npt.ArrayLike) -> I64:
    """``round_half_away_from_zero(x / 2**shift)`` for shifts 0 … 1023 (NVDLA's ``IntShiftRight``
    before its saturation; combine with :func:`saturate`). ``shift`` may be an array."""
    v = _as_i64(x)
    s = _as_i64(shift)
    if s.ndim == 0:
        k = int(s)
        if k < 0:
            raise ValueError("shift_right_round: negative shift")
        if k == 0:
            return v
        if k <= 62:
            # |x| <= 2^62, so |x| + 2^(k-1) stays below 2^63: round the magnitude, restore the sign
            sign = v >> 63  # 0 or -1
            mag: I64 = (np.abs(v) + (1 << (k - 1))) >> k
            return (mag ^ sign) - sign
    if np.any(s < 0):
        raise ValueError("shift_right_round: negative shift")
    s1 = np.minimum(s - 1, 63)  # shifting by s-1 keeps the bit that decides the rounding
    s1c = np.maximum(s1, 0)
    t = v >> s1c
    # x >= 0: floor(x/2^s + 1/2) = (floor(x/2^(s-1)) + 1) >> 1
    pos = (t + 1) >> 1
    # x < 0: ceil(x/2^s - 1/2) = -((1 - ceil(x/2^(s-1))) >> 1)
    mask = np.where(s1c >= 63, np.int64(0x7FFFFFFFFFFFFFFF),
                    (np.int64(1) << np.minimum(s1c, 62)) - 1)
    low = v & mask
    ceil_t = t + (low != 0)
    neg = -((1 - ceil_t) >> 1)
    r = np.where(v >= 0, pos, neg)
    return np.where(s == 0, v, r).astype(np.int64)


def shift_left_sat(x: npt.ArrayLike, shift: npt.ArrayLike, bits: int) -> I64:
    """``x * 2**shift`` saturated to signed ``bits`` (NVDLA's ``IntShiftLeft``); shifts 0 … 63."""
    v = _as_i64(x)
    s = _as_i64(shift)
    lim = np.int64(1) << (bits - 1)
    # Anything of magnitude >= 2^(bits-1) saturates whatever the shift: clip first so that the
    # shift itself cannot overflow int64.
    c = np.clip(v, -lim, lim)
    sc = np.minimum(s, 62 - bits + 1)
    big = (s > sc) & (c != 0)
    r = np.where(big, np.where(c > 0, lim, -lim), c << np.maximum(sc, 0))
    return saturate(r, bits)


def saturate(x: npt.ArrayLike, bits: int) -> I64:
    """Clamp to the signed ``bits``-bit range (NVDLA's ``IntSaturation``)."""
    lim = 1 << (bits - 1)
    out: I64 = np.clip(_as_i64(x), -lim, lim - 1)
    return out


def saturate_unsigned(x: npt.ArrayLike, bits: int) -> I64:
    """Clamp to 0 … 2**bits - 1."""
    return np.clip(_as_i64(x), 0, (1 << bits) - 1).astype(np.int64)


def wrap(x: npt.ArrayLike, bits: int) -> I64:
    """Keep the low ``bits`` bits as a signed value (an assignment to a narrower integer)."""
    v = _as_i64(x)
    if bits >= 64:
        return v
    m = np.int64((1 << bits) - 1)
    h = np.int64(1 << (bits - 1))
    out: I64 = (((v & m) ^ h) - h).astype(np.int64)
    return out


def wrap_unsigned(x: npt.ArrayLike, bits: int) -> I64:
    """Keep the low ``bits`` bits as an unsigned value."""
    out: I64 = (_as_i64(x) & np.int64((1 << bits) - 1)).astype(np.int64)
    return out


def sign_extend(value: int, bits: int) -> int:
    """A register field of ``bits`` bits read as a signed number."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def shift_right_round_sat(x: npt.ArrayLike, shift: npt.ArrayLike, bits: int) -> I64:
    """NVDLA's ``IntShiftRight<…, oWidth=bits>``: round half away from zero, then saturate."""
    return saturate(shift_right_round(x, shift), bits)
