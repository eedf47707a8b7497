"""Requantization on NVDLA's SDP with one-byte operands: the integer parameters that turn a
convolution's 32-bit sums, or two INT8 tensors to add, into the INT8 output
``round(real / s_out) + z_out``.

NVDLA's SDP multiplies in fixed point and rounds half away from zero (onnxruntime rounds a float
product half to even); its memory operands here are one byte each (the INT8-only configurations'
firmware takes operand cubes of the processing precision), so:

- convolution: X1 adds the bias's high part (int8 << s1) and multiplies by m1 (int8), X2 adds the
  bias's low part (int8 << s2) and multiplies by m2 (int8), ReLU; the output converter multiplies by a
  16-bit M, shifts right by T and adds the zero point (its offset). Per output channel the multiplier
  is ``m1 * m2 * M / 2**(t1 + T)``: two bytes whose product is within about 1/1000 of the
  wanted one (1/5000 on average; exact for the scales the calibration chooses, which it snaps to
  such products);
- element-wise add: X1 ``(a - z_a) * q_a`` (q_a 16 bits, per layer), X2 adds ``b << k`` (b per
  element), the converter ``(x - offset) * M >> T``;
- a scale change: X1 ``round((a - z_in) * M / 2**T)``, the converter adds the zero point.

Usage::

    x1, x2, cvt = conv_stages(multipliers, bias, bound, z_out, relu=True)
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from pydla.compiler.nvdla.plan import Alu, Cvt, Ref, Stage
from pydla.errors import DlaError, NvError

INT31 = (1 << 31) - 1
# NVIDIA's firmware writes an X stage's MUL_SHIFT_VALUE only when the stage multiplies, and the
# truncation applies to an ALU-only stage too: every X1 stage here multiplies, and every X2 stage
# that multiplies shifts by 0, so that an ALU-only X2 stage (the Add's) finds 0 in its group's
# register whatever ran there before.
X2_TRUNCATE = 0
PRODUCT_MAX = 127 * 127
BIAS_SHIFT_MAX = 24  # 127 << 24 < 2**31


def normalized(value: float) -> tuple[int, int]:
    """(M, T) with M in [2**14, 2**15) and ``M / 2**T`` within 2**-15 of ``value`` (relatively)."""
    if not value > 0 or not math.isfinite(value):
        raise DlaError(NvError.BadValue, f"requantization multiplier {value}: must be positive and finite")
    t = 14 - math.floor(math.log2(value))
    m = round(value * 2.0**t)
    if m >= 1 << 15:
        m, t = round(value * 2.0 ** (t - 1)), t - 1
    if not 0 <= t <= 63:
        raise DlaError(
            NvError.NotSupported,
            f"requantization multiplier {value:g} is out of NVDLA's range (a shift of 0..63)",
        )
    return m, t


@lru_cache(maxsize=1)
def _products() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Every product of two integers 1..127 (sorted, unique) and a pair making it."""
    a = np.arange(1, 128, dtype=np.int64)
    prod = (a[:, None] * a[None, :]).ravel()
    first = np.repeat(a, 127)
    second = np.tile(a, 127)
    values, index = np.unique(prod, return_index=True)
    return values, first[index], second[index]


def byte_pair(targets: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(m1, m2) in 1..127 whose product is nearest each target (1 <= target <= 127**2)."""
    values, m1, m2 = _products()
    i = np.clip(np.searchsorted(values, targets), 1, len(values) - 1)
    lower = np.abs(values[i - 1] - targets) <= np.abs(values[i] - targets)
    j = np.where(lower, i - 1, i)
    return m1[j], m2[j]


def snap_multipliers(r: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], float]:
    """The multipliers nearest ``r`` that :func:`conv_stages` represents exactly with the unit it
    returns too (for a calibration choosing its weight scales; give conv_stages that unit)."""
    g = _base(r)
    m1, m2 = byte_pair(np.clip(r / g, 1, PRODUCT_MAX))
    return np.asarray(m1 * m2 * g, np.float64), g


def _base(r: npt.NDArray[np.float64]) -> float:
    """The layer's unit G (a 16-bit M / 2**T) for which the byte products m1 * m2 = r / G come nearest
    r, channel by channel (the worst relative error over 48 candidates; products of two bytes are
    densest between about 2000 and 8000)."""
    best, best_error = 0.0, math.inf
    top = float(np.max(r))
    for t_top in np.geomspace(2000, PRODUCT_MAX, 48):
        m, t = normalized(top / t_top)
        g = m / 2.0**t
        targets = np.clip(r / g, 1, PRODUCT_MAX)
        m1, m2 = byte_pair(targets)
        error = float(np.max(np.abs(m1 * m2 * g - r) / r))
        if error < best_error:
            best, best_error = g, error
    return best


def _shift_for(values: npt.NDArray[np.int64] | npt.NDArray[np.float64], limit: int = 127) -> int:
    """The least s with every |round(v / 2**s)| <= limit."""
    big = float(np.max(np.abs(values), initial=0))
    s = 0
    while round(big / 2.0**s) > limit:
        s += 1
    return s


def _bits_over(bound: float, limit: float = INT31) -> int:
    t = 0
    while bound / 2.0**t >= limit:
        t += 1
    return t


def conv_stages(
    r: npt.NDArray[np.float64],
    bias: npt.NDArray[np.int64],
    bound: npt.NDArray[np.float64],
    z_out: int,
    relu: bool,
    base: float | None = None,
) -> tuple[Stage, Stage, Cvt]:
    """X1, X2 and the output converter for sums ``acc`` (|acc| <= bound per channel) requantized as
    ``round((acc + bias) * r) + z_out`` (r per output channel, > 0), with ReLU before the zero point;
    ``base``: the unit G of the byte products (default: the one fitting ``r`` best)."""
    r = np.asarray(r, np.float64)
    if r.size == 0 or not np.all(r > 0):
        raise DlaError(NvError.BadValue, "requantization multipliers must be positive")
    g = _base(r) if base is None else base
    m1, m2 = byte_pair(np.clip(r / g, 1, PRODUCT_MAX))
    bias = np.asarray(bias, np.int64)
    # X1's operand bh << s1 saturates at 32 bits: a bias beyond (a network whose sums are tiny beside
    # its biases) leaves the rest to X2, in X1's output units, which hold it (t1 counts the bias)
    s1 = min(_shift_for(bias), BIAS_SHIFT_MAX)
    bh = np.clip(np.round(bias / 2.0**s1), -127, 127).astype(np.int64)
    residual = bias - bh * (1 << s1)
    # X2 multiplies without a shift (see X2_TRUNCATE), so X1's output leaves room for m2 <= 127
    bound1 = float(np.max((np.asarray(bound) + np.abs(bias) + 2**s1) * m1))
    t1 = _bits_over(bound1, INT31 / 128 - 128 * 128)
    while g * 2.0**t1 * 2**30 <= 256:  # the zero point's offset and the output range fit 32 bits
        t1 += 1
    low = residual * m1 / 2.0**t1
    s2 = _shift_for(low)
    bl = np.round(low / 2.0**s2).astype(np.int64)
    step = g * 2.0**t1  # output steps per unit of X2's output
    m, t = normalized(step)
    x1 = Stage(alu=Alu("sum", bh.astype(np.int8), s1), mul=m1.astype(np.int8), truncate=t1)
    x2 = Stage(
        alu=Alu("sum", bl.astype(np.int8), s2), mul=m2.astype(np.int8), truncate=X2_TRUNCATE, relu=relu
    )
    return x1, x2, Cvt(offset=-round(z_out * 2.0**t / m), scale=m, shift=t)


def add_stages(
    a: Ref, b: Ref, ra: float, za: int, rb: float, zb: int, z_out: int
) -> tuple[Ref, Stage, Stage, Cvt]:
    """The SDP reading ``a`` (returned) with ``b`` per element: ``round((a - za) * ra + (b - zb) * rb) +
    z_out``; the inputs are swapped so that the one read per element has the larger multiplier."""
    if ra > rb:
        a, b, ra, rb, za, zb = b, a, rb, ra, zb, za
    if not (ra > 0 and rb > 0):
        raise DlaError(NvError.BadValue, "Add: input scales must be positive")
    k = 23
    while k > 0 and (
        round(ra / rb * 2**k) > 32767 or (abs(zb) + abs(z_out) / rb + 255 * (1 + ra / rb)) * 2.0**k >= 1 << 31
    ):
        k -= 1
    qa = max(1, round(ra / rb * 2**k))
    m, t = normalized(rb / 2**k)
    x1 = Stage(alu=Alu("sum", -za), mul=qa)
    x2 = Stage(alu=Alu("sum", b, k))
    return a, x1, x2, Cvt(offset=zb * 2**k - round(z_out * 2.0**t / m), scale=m, shift=t)


def rescale_stage(ratio: float, z_in: int, z_out: int) -> tuple[Stage, Cvt]:
    """``round((q - z_in) * ratio) + z_out``."""
    m, t = normalized(ratio)
    return Stage(alu=Alu("sum", -z_in), mul=m, truncate=t), Cvt(offset=-z_out)


def relu_stage(z: int) -> tuple[Stage, Cvt]:
    """``max(q, z)``: ReLU of a quantized tensor."""
    return Stage(alu=Alu("max", z), mul=1), Cvt()
