"""The SDP's integer data path X1 -> X2 -> C in few numpy passes, in cache-sized blocks: equal, element for
element, to the stage-by-stage reference (pydla.hw.nvdla.sdp_int, which stays the definition and
computes every other case: the Y stage, PReLU, FP16 output).

Per X stage the reference makes about ten passes over int64 arrays (the ALU, the product, the rounding
shift as sign, magnitude, add, shift, sign back, the saturation); here a stage is one affine step and
a shift, in place on one int64 block (the first step widens the convolution's int32 block):

- ``v = pick(x, op) · m + add``: ``pick`` the ALU's max or min; a sum's operand is folded into
  ``add = op · m + 2^(k-1)`` (the multiplier bypassed: m = 1), as is the rounding's half. Widths:
  |x + op| < 2^33 (the 33-bit sum), |v| < 2^48 + 2^61;
- the rounding shift by k, half away from zero: ``v = (v - [v < 2^(k-1)]) >> k``: ``v - 2^(k-1)`` is
  the value the reference rounds, and a negative one takes one off, which turns
  ``floor((u + 2^(k-1)) / 2^k)`` into ``-floor((-u + 2^(k-1)) / 2^k)``; for k = 63 every value rounds
  to 0;
- the saturation to 32 bits, ReLU: ``np.clip``, ``np.maximum``, in place.

C is the same step: ``(v - offset) · scale = v · scale - offset · scale``, the rounding shift, then one
saturation to the output's 8 or 16 bits (the 17-bit saturation before it changes nothing a narrower one
keeps), written straight into the output's dtype.

The blocks are rows of the cube small enough (:data:`BLOCK` elements) for a block's passes to stay in
the processor's cache.

Usage::

    if fusable(params, pout):
        out = datapath(data, params, operands, pout)   # (N, lanes, H, W) of pout's dtype
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64, shift_left_sat, sign_extend
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import ALU_MAX, ALU_MIN, SdpParams, SdpX

BLOCK = 1 << 16  # elements of one block: 512 KiB of int64, within a core's L2 cache
_LO32, _HI32 = np.int64(-(1 << 31)), np.int64((1 << 31) - 1)


@dataclass(frozen=True)
class _Stage:
    """One stage as ``v = pick(v, bound) · mul + add``, then the rounding shift and the saturation:
    ``pick`` is the ALU's max or min (None for a sum or no ALU), ``add`` holds a sum ALU's operand times
    the multiplier and the rounding's half (2^(shift-1)), so that ``v - half`` is the value the
    reference shifts."""

    pick: np.ufunc | None
    bound: I64 | None
    mul: I64 | None
    add: I64 | int
    half: int
    shift: int
    lo: np.int64
    hi: np.int64
    relu: bool


def fusable(p: SdpParams, pout: Precision) -> bool:
    """Whether :func:`datapath` computes ``p`` (X stages without PReLU, Y bypassed, integer output)."""
    x_ok = all(s.bypass or s.mul_bypass or not s.mul_prelu for s in (p.bs, p.bn))
    return x_ok and bool(p.ew.bypass) and pout.is_int


def _stage(x: SdpX, alu_op: I64, mul_op: I64) -> _Stage | None:
    if x.bypass:
        return None
    shift = x.alu_shift_value & 0x3F
    alu = None
    if not x.alu_bypass:  # a 16-bit operand shifted by at most 16 stays within 32 bits: nothing saturates
        alu = (np.left_shift(alu_op, shift, dtype=np.int64) if shift <= 16
               else shift_left_sat(alu_op, shift, 32))
    mul = None if x.mul_bypass else np.asarray(mul_op, dtype=np.int64)
    k = x.mul_shift_value & 0x3F
    half = 1 << (k - 1) if 0 < k < 63 else 0
    pick = None if alu is None else np.maximum if x.alu_algo == ALU_MAX else np.minimum \
        if x.alu_algo == ALU_MIN else None
    summed = alu if alu is not None and pick is None else None
    add: I64 | int = half
    if summed is not None:
        add = (summed if mul is None else summed * mul) + half
    return _Stage(pick, alu if pick is not None else None, mul, add, half, k, _LO32, _HI32,
                  not x.relu_bypass)


@functools.lru_cache(maxsize=256)  # the same registers at every run of a network
def _converter(cvt_offset: int, cvt_scale: int, cvt_shift: int, pout: Precision) -> _Stage:
    """C as a stage: ``(v - offset) · scale = v · scale - offset · scale``, saturated to the output's
    bits at once."""
    offset, scale, k = sign_extend(cvt_offset, 32), sign_extend(cvt_scale, 16), cvt_shift & 0x3F
    half = 1 << (k - 1) if 0 < k < 63 else 0
    bits = 8 * pout.bpe
    return _Stage(None, None, np.asarray(scale, dtype=np.int64), half - offset * scale, half, k,
                  np.int64(-(1 << (bits - 1))), np.int64((1 << (bits - 1)) - 1), False)


def _rows(a: I64, h0: int, h1: int) -> I64:
    """Rows h0 … h1 - 1 of an operand that broadcasts over (N, lanes, H, W)."""
    return a[..., h0:h1, :] if a.ndim >= 2 and a.shape[-2] > 1 else a


def _apply(v: npt.NDArray[np.integer], own: bool, s: _Stage, h0: int, h1: int,
           into: npt.NDArray[np.generic] | None = None) -> I64:
    """One stage on a block: in place when ``own`` (our int64 block), else into a new int64 block; the
    saturated result written to ``into`` (the output's dtype) when given."""
    def step(ufunc: np.ufunc, operand: object) -> None:
        nonlocal v, own
        if own:
            ufunc(v, operand, out=v)
        else:
            v, own = ufunc(v, operand, dtype=np.int64), True

    if s.pick is not None and s.bound is not None:
        step(s.pick, _rows(s.bound, h0, h1))
    if s.mul is not None:
        step(np.multiply, _rows(s.mul, h0, h1) if s.mul.ndim else s.mul)
    if not isinstance(s.add, int) or s.add:
        step(np.add, _rows(s.add, h0, h1) if not isinstance(s.add, int) else s.add)
    if not own:
        v, own = v.astype(np.int64), True
    out: I64 = v  # type: ignore[assignment]
    if s.shift >= 63:
        out[...] = 0  # every |v| < 2^62 rounds to 0
    elif s.shift:
        out -= out < s.half  # v - half < 0: the reference's value is negative
        out >>= s.shift
    if into is not None:
        np.clip(out, s.lo, s.hi, out=into, casting="unsafe")
        return out
    np.clip(out, s.lo, s.hi, out=out)
    if s.relu:
        np.maximum(out, 0, out=out)
    return out


def datapath(data: npt.NDArray[np.integer], p: SdpParams, ops: dict[str, tuple[I64, I64]], pout: Precision
             ) -> npt.NDArray[np.generic]:
    """X1, X2 and C on ``data`` (N, lanes, H, W) of 32-bit values; ``ops`` the stages' (ALU, MUL)
    16-bit operands, broadcasting over the data. The result has ``pout``'s dtype, channel-last in memory
    (a transposed view, as the feature format stores it)."""
    stages = [s for s in (_stage(p.bs, *ops["bs"]), _stage(p.bn, *ops["bn"])) if s is not None]
    cvt = _converter(p.cvt_offset, p.cvt_scale, p.cvt_shift, pout)
    n, lanes, h, w = data.shape
    out: npt.NDArray[np.generic] = np.empty((n, h, w, lanes), dtype=pout.dtype).transpose(0, 3, 1, 2)
    step = max(1, BLOCK // max(1, n * lanes * w))
    for h0 in range(0, h, step):
        h1 = min(h, h0 + step)
        v: npt.NDArray[np.integer] = data[:, :, h0:h1]
        own = False
        for s in stages:
            v, own = _apply(v, own, s, h0, h1), True
        _apply(v, own, cvt, h0, h1, into=out[:, :, h0:h1])
    return out
