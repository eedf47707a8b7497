"""The SDP's integer data path X1 -> X2 -> C in few numpy passes, in cache-sized blocks: equal, element for
element, to the stage-by-stage reference (pydla.hw.nvdla.sdp_int, which stays the definition and
computes every other case: the Y stage, PReLU, FP16 output).

Per X stage the reference makes about ten passes over int64 arrays (the ALU, the product, the rounding
shift as sign, magnitude, add, shift, sign back, the saturation); here each stage is, in place on one
int64 block:

- ALU: ``v = x + op`` (max / min: ``np.maximum`` / ``np.minimum``); |v| < 2^33;
- MUL: ``v *= m``; |v| < 2^33 · 2^15 = 2^48;
- the rounding shift by k: ``v = (v + 2^(k-1) + (v >> 63)) >> k``, round half away from zero for
  |v| < 2^62 (``v >> 63`` is -1 for negative v, which turns ``floor((v + 2^(k-1)) / 2^k)`` into
  ``-floor((-v + 2^(k-1)) / 2^k)``); for k = 63 every |v| < 2^48 rounds to 0;
- the saturation to 32 bits, ReLU: ``np.clip``, ``np.maximum``, in place.

C: ``v = (v - offset) · scale`` (|v| < 2^33 · 2^15), the rounding shift, then one saturation to the
output's 8 or 16 bits (the 17-bit saturation before it changes nothing a narrower one keeps), written
straight into the output's dtype.

The blocks are rows of the cube small enough (:data:`BLOCK` elements) for a block's passes to stay in
the processor's cache.

Usage::

    if fusable(params, pout):
        out = datapath(data, params, operands, pout)   # (N, lanes, H, W) of pout's dtype
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.hw.nvdla.intmath import I64, shift_left_sat, wrap
from pydla.hw.nvdla.precision import Precision
from pydla.hw.nvdla.sdp_params import ALU_MAX, ALU_MIN, SdpParams, SdpX

BLOCK = 1 << 15  # elements of one block: 256 KiB of int64
_LO32, _HI32 = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True)
class _Stage:
    """One X stage with its operands ready: ``alu`` already shifted and saturated (None: bypassed)."""

    alu: I64 | None
    algo: int
    mul: I64 | None
    shift: int
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
    return _Stage(alu, x.alu_algo, mul, x.mul_shift_value & 0x3F, not x.relu_bypass)


def _rows(a: I64, h0: int, h1: int) -> I64:
    """Rows h0 … h1 - 1 of an operand that broadcasts over (N, lanes, H, W)."""
    return a[..., h0:h1, :] if a.ndim >= 2 and a.shape[-2] > 1 else a


def round_shift(v: I64, k: int) -> None:
    """``v = round_half_away_from_zero(v / 2^k)`` in place, for |v| < 2^62 and 0 <= k <= 63."""
    if k == 0:
        return
    if k >= 63:
        v[...] = 0
        return
    sign = v >> 63
    v += sign
    v += 1 << (k - 1)
    v >>= k


def _apply(v: I64, s: _Stage, h0: int, h1: int) -> None:
    if s.alu is not None:
        op = _rows(s.alu, h0, h1)
        if s.algo == ALU_MAX:
            np.maximum(v, op, out=v)
        elif s.algo == ALU_MIN:
            np.minimum(v, op, out=v)
        else:
            v += op
    if s.mul is not None:
        v *= _rows(s.mul, h0, h1)
    round_shift(v, s.shift)
    np.clip(v, _LO32, _HI32, out=v)
    if s.relu:
        np.maximum(v, 0, out=v)


def datapath(data: npt.NDArray[np.integer], p: SdpParams, ops: dict[str, tuple[I64, I64]], pout: Precision
             ) -> npt.NDArray[np.generic]:
    """X1, X2 and C on ``data`` (N, lanes, H, W) of 32-bit values; ``ops`` the stages' (ALU, MUL)
    16-bit operands, broadcasting over the data. The result has ``pout``'s dtype, channel-last in memory
    (a transposed view, as the feature format stores it)."""
    stages = [s for s in (_stage(p.bs, *ops["bs"]), _stage(p.bn, *ops["bn"])) if s is not None]
    offset, scale, shift = int(wrap(p.cvt_offset, 32)), int(wrap(p.cvt_scale, 16)), p.cvt_shift & 0x3F
    lo, hi = -(1 << (8 * pout.bpe - 1)), (1 << (8 * pout.bpe - 1)) - 1
    n, lanes, h, w = data.shape
    out: npt.NDArray[np.generic] = np.empty((n, h, w, lanes), dtype=pout.dtype).transpose(0, 3, 1, 2)
    step = max(1, BLOCK // max(1, n * lanes * w))
    for h0 in range(0, h, step):
        h1 = min(h, h0 + step)
        v = data[:, :, h0:h1].astype(np.int64)
        for s in stages:
            _apply(v, s, h0, h1)
        if offset:
            v -= offset
        v *= scale
        round_shift(v, shift)
        np.clip(v, lo, hi, out=out[:, :, h0:h1], casting="unsafe")
    return out
