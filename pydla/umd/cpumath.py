"""pydla's CPU library: element-wise math, reductions, Pow, comparisons and logic, Where, Cast,
ArgMax / ArgMin, Gather, Expand and Tile (the functions ``unary``, ``reduce``, ``pow``, ``compare``,
``where``, ``cast``, ``argmax``, ``gather``, ``expand`` and ``tile`` of :mod:`pydla.umd.cpulib`, which
documents their arguments).

The operators each function takes are declared data of the loadable side
(:mod:`pydla.loadable.cpuops`, what the compiler emits); the tables here implement exactly those,
keyed by their names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.loadable import cpuops
from pydla.umd.cpuargs import (
    DTYPES,
    INT_DTYPES,
    broadcast_args,
    ints_arg,
    shape_arg,
    store_typed,
    tensor_arg,
    typed_arg,
)


def _implement(what: str, names: tuple[str, ...], table: dict[str, Any]) -> dict[str, Any]:
    """``table`` in the order of the declared ``names``; it must implement exactly those."""
    if set(table) != set(names):
        missing, extra = sorted(set(names) - set(table)), sorted(set(table) - set(names))
        raise RuntimeError(f"cpumath: {what} implements {extra or 'no others'} beyond the declared "
                           f"operators and lacks {missing or 'none'} (see pydla.loadable.cpuops)")
    return {name: table[name] for name in names}


def erf(x: Any) -> Any:
    """erf in float64 (numpy has none): its Maclaurin series below |x| = 0.5, where it keeps full
    relative precision; above, 1 - erfc by the Chebyshev fit of erfc whose fractional error is
    below 1.2e-7 (Numerical Recipes' erfcc)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    far = np.sign(x) * (1.0 - t * np.exp(poly))
    x2 = x * x
    term, near = x.copy(), x.copy()
    for n in range(1, 12):  # x * sum (-x^2)^n / (n! (2n + 1)): |x| < 0.5 needs a dozen terms
        term = term * -x2 / n
        near = near + term / (2 * n + 1)
    return np.where(z < 0.5, near * (2.0 / np.sqrt(np.pi)), far)


def softplus(x: Any) -> Any:
    return np.logaddexp(0.0, x)


# ONNX's element-wise math on floats that SDP has no form for: name -> f(x, alpha, beta), computed
# in float64 and stored in the destination's type. alpha / beta are the operator's attributes
# (the compiler passes ONNX's defaults when the model leaves them out).
UNARY: dict[str, Callable[[Any, float, float], Any]] = _implement("UNARY", cpuops.UNARY_OPS, {
    "Exp": lambda x, a, b: np.exp(x),
    "Log": lambda x, a, b: np.log(x),
    "Sqrt": lambda x, a, b: np.sqrt(x),
    "Sin": lambda x, a, b: np.sin(x),
    "Cos": lambda x, a, b: np.cos(x),
    "Tan": lambda x, a, b: np.tan(x),
    "Asin": lambda x, a, b: np.arcsin(x),
    "Acos": lambda x, a, b: np.arccos(x),
    "Atan": lambda x, a, b: np.arctan(x),
    "Sinh": lambda x, a, b: np.sinh(x),
    "Cosh": lambda x, a, b: np.cosh(x),
    "Asinh": lambda x, a, b: np.arcsinh(x),
    "Acosh": lambda x, a, b: np.arccosh(x),
    "Atanh": lambda x, a, b: np.arctanh(x),
    "Floor": lambda x, a, b: np.floor(x),
    "Ceil": lambda x, a, b: np.ceil(x),
    "Round": lambda x, a, b: np.round(x),  # halves to even, as ONNX says
    "Sign": lambda x, a, b: np.sign(x),
    "Erf": lambda x, a, b: erf(x),
    "Softplus": lambda x, a, b: softplus(x),
    "Softsign": lambda x, a, b: x / (1.0 + np.abs(x)),
    "Elu": lambda x, a, b: np.where(x > 0, x, a * np.expm1(x)),
    "Celu": lambda x, a, b: np.maximum(x, 0.0) + np.minimum(0.0, a * np.expm1(x / a)),
    "Selu": lambda x, a, b: b * np.where(x > 0, x, a * np.expm1(x)),  # alpha, gamma
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0.0),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0.0, 1.0),
    "HardSwish": lambda x, a, b: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "Mish": lambda x, a, b: x * np.tanh(softplus(x)),
    "Gelu": lambda x, a, b: 0.5 * x * (1.0 + erf(x / np.sqrt(2.0))),
    "GeluTanh": lambda x, a, b: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))),
})


def unary(args: list[Any]) -> None:
    """unary(src, dst, shape, op, alpha, beta, src_dtype, dst_dtype): an ONNX element-wise math
    operator of :data:`UNARY` on a float tensor."""
    src, dst, shape_text, op, alpha, beta, src_dtype, dst_dtype = args
    fn = UNARY.get(op) if isinstance(op, str) else None
    if fn is None:
        raise DlaError(NvError.BadParameter, f"cpulib: unary op {op!r} (one of {', '.join(UNARY)})")
    params = []
    for value, what in ((alpha, "alpha"), (beta, "beta")):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DlaError(NvError.BadParameter, f"cpulib: unary {op} {what} {value!r} is not a number")
        params.append(float(value))
    shape = shape_arg(shape_text)
    x = tensor_arg(src, shape, src_dtype, "source").astype(np.float64)
    y = tensor_arg(dst, shape, dst_dtype, "destination", exact=True)
    y[...] = fn(x, params[0], params[1])


# ONNX's reductions: name -> f(x, axes) with keepdims. Integer tensors: the first four, exactly
# (a sum or product wraps around as the type does).
REDUCE: dict[str, Callable[[Any, tuple[int, ...]], Any]] = _implement("REDUCE", cpuops.REDUCE_OPS, {
    "ReduceSum": lambda x, axes: np.sum(x, axis=axes, keepdims=True, dtype=x.dtype),
    "ReduceMax": lambda x, axes: np.max(x, axis=axes, keepdims=True),
    "ReduceMin": lambda x, axes: np.min(x, axis=axes, keepdims=True),
    "ReduceProd": lambda x, axes: np.prod(x, axis=axes, keepdims=True, dtype=x.dtype),
    "ReduceMean": lambda x, axes: np.mean(x, axis=axes, keepdims=True),
    "ReduceL1": lambda x, axes: np.sum(np.abs(x), axis=axes, keepdims=True),
    "ReduceL2": lambda x, axes: np.sqrt(np.sum(x * x, axis=axes, keepdims=True)),
    "ReduceSumSquare": lambda x, axes: np.sum(x * x, axis=axes, keepdims=True),
    "ReduceLogSum": lambda x, axes: np.log(np.sum(x, axis=axes, keepdims=True)),
    "ReduceLogSumExp": lambda x, axes: logsumexp(x, axes),
})
INTEGER_REDUCE = cpuops.INTEGER_REDUCE_OPS


def logsumexp(x: Any, axes: tuple[int, ...]) -> Any:
    top = np.max(x, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return top + np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True))


def reduce(args: list[Any]) -> None:
    """reduce(src, dst, shape, axes, noop_with_empty_axes, op, src_dtype, dst_dtype): an ONNX
    reduction of :data:`REDUCE`; floats in float64 (float32 or float16 on either side), integers
    exactly (the same type on both)."""
    src, dst, shape_text, axes_t, noop, op, dtype, dst_dtype = args
    fn = REDUCE.get(op) if isinstance(op, str) else None
    if fn is None:
        raise DlaError(NvError.BadParameter, f"cpulib: reduction {op!r} (one of {', '.join(REDUCE)})")
    if (dtype in INT_DTYPES or dst_dtype in INT_DTYPES) and (op not in INTEGER_REDUCE or dtype != dst_dtype):
        raise DlaError(NvError.BadParameter, f"cpulib: {op} of {dtype} into {dst_dtype} (integers: "
                                             f"{', '.join(INTEGER_REDUCE)}, into the same type)")
    shape = shape_arg(shape_text)
    rank = len(shape)
    given = ints_arg(axes_t, "axes")
    if not all(-rank <= a < rank for a in given):
        raise DlaError(NvError.BadParameter, f"cpulib: axes {given} of a rank-{rank} tensor")
    axes = tuple(sorted({a % rank for a in given}))
    if len(axes) != len(given):
        raise DlaError(NvError.BadParameter, f"cpulib: axes {given} repeat an axis")
    if not axes and not noop:
        axes = tuple(range(rank))
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    if dtype == "bool" or dst_dtype == "bool":  # ReduceMax / ReduceMin of bools: any / all
        if dtype != dst_dtype or op not in ("ReduceMax", "ReduceMin"):
            raise DlaError(NvError.BadParameter, f"cpulib: {op} of {dtype} into {dst_dtype}")
        xb = tensor_arg(src, shape, "uint8", "source", any_type=True) != 0
        yb = tensor_arg(dst, out_shape, "uint8", "destination", any_type=True, exact=True)
        reduce = np.any if op == "ReduceMax" else np.all
        yb[...] = reduce(xb, axis=axes, keepdims=True) if axes else xb
        return
    x = tensor_arg(src, shape, dtype, "source", any_type=True)
    y = tensor_arg(dst, out_shape, dst_dtype, "destination", any_type=True, exact=True)
    if not axes:
        y[...] = x
        return
    y[...] = fn(x.astype(np.float64) if dtype in DTYPES else x, axes)


def power(args: list[Any]) -> None:
    """pow(a, b, dst, a_shape, b_shape, out_shape, a_dtype, b_dtype, dst_dtype): ONNX Pow, any
    numeric types on either side, broadcasting: computed in float64; an integer result is rounded
    toward zero, as a C cast of pow() does."""
    a_buf, b_buf, dst, a_text, b_text, out_text, a_dtype, b_dtype, dst_dtype = args
    a_shape, b_shape, out_shape = broadcast_args("pow", out_text, a_text, b_text)
    a = tensor_arg(a_buf, a_shape, a_dtype, "base", any_type=True).astype(np.float64)
    b = tensor_arg(b_buf, b_shape, b_dtype, "exponent", any_type=True).astype(np.float64)
    y = tensor_arg(dst, out_shape, dst_dtype, "destination", any_type=True, exact=True)
    result = np.power(a, b)
    if dst_dtype in INT_DTYPES:
        info = np.iinfo(INT_DTYPES[dst_dtype])
        result = np.clip(np.nan_to_num(np.trunc(result)), info.min, info.max)
    y[...] = result


COMPARE: dict[str, Callable[[Any, Any], Any]] = _implement("COMPARE", cpuops.COMPARE_OPS, {
    "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
})


def compare(args: list[Any]) -> None:
    """compare(a, b, dst, a_shape, b_shape, out_shape, op, a_dtype, b_dtype): ONNX Equal / Less /
    LessOrEqual / Greater / GreaterOrEqual (any numeric or bool types) and And / Or / Xor (bools),
    broadcasting, into a bool tensor."""
    a_buf, b_buf, dst, a_text, b_text, out_text, op, a_dtype, b_dtype = args
    fn = COMPARE.get(op) if isinstance(op, str) else None
    if fn is None:
        raise DlaError(NvError.BadParameter, f"cpulib: comparison {op!r} (one of {', '.join(COMPARE)})")
    a_shape, b_shape, out_shape = broadcast_args(op, out_text, a_text, b_text)
    a = typed_arg(a_buf, a_shape, a_dtype, "a")
    b = typed_arg(b_buf, b_shape, b_dtype, "b")
    store_typed(typed_arg(dst, out_shape, "bool", "destination", exact=True), fn(a, b), "bool")


def where(args: list[Any]) -> None:
    """where(cond, x, y, dst, cond_shape, x_shape, y_shape, out_shape, x_dtype, y_dtype, dst_dtype):
    ONNX Where, broadcasting (x, y and dst of one ONNX type; float32 or float16 where they lie)."""
    c_buf, x_buf, y_buf, dst, c_text, x_text, y_text, out_text, x_dtype, y_dtype, dtype = args
    kinds = {t in DTYPES for t in (x_dtype, y_dtype, dtype)}
    if len(kinds) != 1 or (kinds == {False} and len({x_dtype, y_dtype, dtype}) != 1):
        raise DlaError(NvError.BadParameter, f"cpulib: Where of {x_dtype} and {y_dtype} into {dtype}")
    c_shape, x_shape, y_shape, out_shape = broadcast_args("Where", out_text, c_text, x_text, y_text)
    cond = typed_arg(c_buf, c_shape, "bool", "condition")
    x = typed_arg(x_buf, x_shape, x_dtype, "x")
    y = typed_arg(y_buf, y_shape, y_dtype, "y")
    store_typed(typed_arg(dst, out_shape, dtype, "destination", exact=True), np.where(cond, x, y), dtype)


def cast(args: list[Any]) -> None:
    """cast(src, dst, shape, src_dtype, dst_dtype): ONNX Cast between the loadable's element types
    (a float to an integer rounds toward zero, as C does; to bool: nonzero)."""
    src, dst, shape_text, src_dtype, dst_dtype = args
    shape = shape_arg(shape_text)
    x = typed_arg(src, shape, src_dtype, "source")
    y = typed_arg(dst, shape, dst_dtype, "destination", exact=True)
    if dst_dtype != "bool" and dst_dtype in INT_DTYPES and src_dtype in DTYPES:
        info = np.iinfo(INT_DTYPES[dst_dtype])
        x = np.clip(np.nan_to_num(np.trunc(x.astype(np.float64))), info.min, info.max)
    store_typed(y, x, dst_dtype)


def argmax(args: list[Any]) -> None:
    """argmax(src, dst, shape, axis, select_last_index, op, dtype): ONNX ArgMax / ArgMin into int64
    indices, the reduced axis kept as 1 (the same bytes with or without keepdims)."""
    src, dst, shape_text, axis, last, op, dtype = args
    if op not in cpuops.ARGMAX_OPS:
        raise DlaError(NvError.BadParameter, f"cpulib: {op!r} is not ArgMax or ArgMin")
    shape = shape_arg(shape_text)
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        raise DlaError(NvError.BadParameter, f"cpulib: axis {axis!r} of a rank-{len(shape)} tensor")
    axis %= len(shape)
    x = typed_arg(src, shape, dtype, "source")
    out_shape = tuple(1 if i == axis else d for i, d in enumerate(shape))
    y = tensor_arg(dst, out_shape, "int64", "destination", any_type=True, exact=True)
    pick = np.argmax if op == "ArgMax" else np.argmin
    # The last of equal extremes is the first one along the reversed axis.
    index = shape[axis] - 1 - pick(np.flip(x, axis=axis), axis=axis) if last else pick(x, axis=axis)
    y[...] = np.expand_dims(index, axis)


def gather(args: list[Any]) -> None:
    """gather(data, indices, dst, data_shape, indices_shape, axis, dtype, indices_dtype, dst_dtype):
    ONNX Gather; an index outside -n..n-1 of the axis is an error, not a wrap or a read past the
    tensor."""
    data_buf, idx_buf, dst, data_text, idx_text, axis, dtype, idx_dtype, dst_dtype = args
    shape = shape_arg(data_text)
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        raise DlaError(NvError.BadParameter, f"cpulib: gather axis {axis!r} of a rank-{len(shape)} tensor")
    axis %= len(shape)
    if idx_dtype not in ("int64", "int32"):
        raise DlaError(NvError.BadParameter, f"cpulib: gather indices of {idx_dtype} (int64 or int32)")
    idx_shape = shape_arg(idx_text)
    indices = tensor_arg(idx_buf, idx_shape, idx_dtype, "indices", any_type=True).astype(np.int64)
    n = shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        bad = int(indices[(indices < -n) | (indices >= n)].ravel()[0])
        raise DlaError(NvError.BadValue, f"cpulib: gather index {bad} outside -{n}..{n - 1} of axis {axis}")
    x = typed_arg(data_buf, shape, dtype, "data")
    y = typed_arg(dst, shape[:axis] + idx_shape + shape[axis + 1:], dst_dtype, "destination", exact=True)
    store_typed(y, np.take(x, indices % n, axis=axis), dst_dtype)


def expand(args: list[Any]) -> None:
    """expand(src, dst, src_shape, out_shape, dtype, dst_dtype): ONNX Expand."""
    src, dst, src_text, out_text, dtype, dst_dtype = args
    src_shape, out_shape = broadcast_args("Expand", out_text, src_text, out_text)[0::2]
    store_typed(typed_arg(dst, out_shape, dst_dtype, "destination", exact=True),
                np.broadcast_to(typed_arg(src, src_shape, dtype, "source"), out_shape), dst_dtype)


def tile(args: list[Any]) -> None:
    """tile(src, dst, shape, repeats, dtype, dst_dtype): ONNX Tile (repeats as text or an int64
    buffer)."""
    src, dst, shape_text, repeats_t, dtype, dst_dtype = args
    shape = shape_arg(shape_text)
    repeats = ints_arg(repeats_t, "repeats")
    if len(repeats) != len(shape) or min(repeats, default=1) < 1:
        raise DlaError(NvError.BadParameter, f"cpulib: tile repeats {repeats} for a rank-{len(shape)} tensor")
    out_shape = tuple(d * k for d, k in zip(shape, repeats, strict=True))
    store_typed(typed_arg(dst, out_shape, dst_dtype, "destination", exact=True),
                np.tile(typed_arg(src, shape, dtype, "source"), repeats), dst_dtype)
