"""SDP, the single-point data processor: bias, batch norm, element-wise operations and activation
on a cube from memory or on CONV's result in flight. :func:`decode_sdp` checks the registers and
makes the views once; what it returns computes (see :mod:`pydla.hw.blocks`).

Usage::

    execute = decode_sdp(regs, mem)
    execute(None, False)                   # from memory; or execute(conv_result, folded)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw import compute
from pydla.hw.blockio import F32, Array, ContextMemory, HwError, addr, f32
from pydla.hw.blockio import bad_config as _bad
from pydla.hw.lut import LUT_INDEXED_MIN_ENTRIES, Interpolator, interp_blocks

_EW: dict[int, str] = {R.sdp_ew_op_e.ADD: "add", R.sdp_ew_op_e.SUB: "sub", R.sdp_ew_op_e.MUL: "mul",
                       R.sdp_ew_op_e.MAX: "max", R.sdp_ew_op_e.MIN: "min", R.sdp_ew_op_e.DIV: "div"}
_ACT: dict[int, str] = {R.sdp_act_e.NONE: "none", R.sdp_act_e.RELU: "relu",
                        R.sdp_act_e.LEAKY_RELU: "leaky_relu", R.sdp_act_e.PRELU: "prelu",
                        R.sdp_act_e.CLAMP: "clamp", R.sdp_act_e.SIGMOID: "sigmoid", R.sdp_act_e.TANH: "tanh"}


def run_sdp(r: R.sdp_regs_t, mem: ContextMemory, flying: Array | None = None, folded: bool = False) -> None:
    """Bias, batch norm, element-wise, activation; from memory or from CONV (``flying``). With
    ``folded``, the bias and element-wise ADD are already in ``flying`` (see :func:`sdp_addends`)."""
    decode_sdp(r, mem)(flying, folded)


def decode_sdp(r: R.sdp_regs_t, mem: ContextMemory) -> Callable[[Array | None, bool], None]:
    """:func:`run_sdp`, decoded: a function of the flying result and ``folded``."""
    dtype = mem.dtype(r.d_precision, "SDP")
    out_dtype = mem.dtype(r.d_out_precision, "SDP output")
    dims = (r.d_src.channels, r.d_src.height, r.d_src.width)
    src: Array | None = None
    if r.d_src_mode == R.sdp_src_mode_e.MEMORY:
        src = mem.cube(r.d_src, dtype, "SDP source")
    elif r.d_src_mode != R.sdp_src_mode_e.FLYING:
        raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"SDP: source mode {r.d_src_mode} is unknown")
    dst = mem.cube(r.d_dst, out_dtype, "SDP destination")
    _bad(dst.shape != dims, f"SDP: destination dims {dst.shape}, source {dims}")
    c = dims[0]
    bias = mem.vector(addr(r.d_bias_addr_lo, r.d_bias_addr_hi), c, dtype) if r.d_bias_enable else None
    scale = shift = None
    if r.d_bn_enable:
        scale = mem.vector(addr(r.d_scale_addr_lo, r.d_scale_addr_hi), c, dtype)
        shift = mem.vector(addr(r.d_shift_addr_lo, r.d_shift_addr_hi), c, dtype)
    ew: tuple[str, Array, bool] | None = None
    if r.d_ew_op != R.sdp_ew_op_e.NONE:
        op = _EW.get(r.d_ew_op)
        _bad(op is None, f"SDP: element-wise op {r.d_ew_op} is unknown")
        assert op is not None
        ew_addr = addr(r.d_ew_addr_lo, r.d_ew_addr_hi)
        if r.d_ew_mode == R.sdp_ew_mode_e.CUBE:
            y = mem.strided(ew_addr, dims, (r.d_ew_surf_stride, r.d_ew_line_stride, dtype.itemsize), dtype)
        elif r.d_ew_mode == R.sdp_ew_mode_e.PER_CHANNEL:
            y = mem.vector(ew_addr, c, dtype).reshape(c, 1, 1)
        elif r.d_ew_mode == R.sdp_ew_mode_e.SCALAR:
            y = mem.vector(ew_addr, 1, dtype).reshape(1, 1, 1)
        else:
            raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"SDP: element-wise mode {r.d_ew_mode} is unknown")
        ew = (op, y, bool(r.d_ew_swap))
    lut = _decode_lut(r, mem) if r.d_act == R.sdp_act_e.LUT else None
    act = _ACT.get(r.d_act)
    _bad(lut is None and act is None, f"SDP: activation {r.d_act} is unknown")
    slope = None
    if r.d_act == R.sdp_act_e.PRELU:
        slope = mem.vector(addr(r.d_prelu_addr_lo, r.d_prelu_addr_hi), c, dtype)
    alpha, clip_min, clip_max = f32(r.d_act_alpha), f32(r.d_act_min), f32(r.d_act_max)
    fast = _f32_activation(act, clip_min, clip_max, c * dims[1] * dims[2]) if lut is None else None
    if (fast is not None and src is not None and src.dtype == F32 and dst.dtype == F32
            and bias is None and scale is None and ew is None):
        def activate(flying: Array | None, folded: bool) -> None:
            fast(src, dst)  # numpy's ufuncs read all of an overlapping source before writing
        return activate

    def execute(flying: Array | None, folded: bool) -> None:
        if src is None:
            if flying is None:
                raise HwError(R.dla_hw_error_e.NO_PRODUCER, "SDP: flying mode without a CONV operation")
            _bad(flying.shape != dims, f"SDP: source dims {dims}, CONV produced {flying.shape}")
            x = flying
        else:
            x = src.astype(np.float32)
        if not folded:
            if bias is not None:
                compute.scale_bias(x, None, bias, out=x)
            if scale is not None:
                compute.scale_bias(x, scale, shift, out=x)
            if ew is not None:
                x = _eltwise(x, ew, dims)
        if lut is not None:
            if dst.dtype == F32:
                lut(x, dst)  # straight into the destination
            else:
                lut(x, x)  # rounded to float32 first, as float16 results always were
                np.copyto(dst, x, casting="unsafe")
            return
        assert act is not None
        same = (x.dtype == dst.dtype and x.strides == dst.strides and np.may_share_memory(x, dst)
                and x.ctypes.data == dst.ctypes.data)  # .ctypes is slow: only when it can be true
        if act != "none":
            # Straight into the destination when that is another array (one pass, not two).
            target = x if same or np.may_share_memory(x, dst) else dst
            if fast is not None and x.dtype == F32 and target.dtype == F32:
                fast(x, target)
            else:
                compute.activation(x, act, alpha=alpha, clip_min=clip_min, clip_max=clip_max, slope=slope,
                                   out=target)
            same = target is dst
        if not same:
            np.copyto(dst, x, casting="unsafe")  # unless the result was computed in place
    if src is None and lut is None and fast is not None and dst.dtype == F32:
        return _flying(execute, fast, dst, dims, plain=bias is None and scale is None and ew is None)
    if src is None or src.dtype != F32 or dst.dtype != F32 or bias is not None or scale is not None:
        return execute
    # From float32 memory into float32 memory without bias or batch norm: the stages read the source
    # where it lies and write the destination, no float32 copy of the source in between (the same
    # float32 operations on the same values: the same bits). Measured (this machine, 2 cores shared,
    # load average 8-10; minimum of 60; HardSwish's multiply in MobileNet-v3-small at 128x128): a
    # 16x64x64 multiply 18.9 -> 8.2 us, 240x8x8 5.2 -> 2.1 us; its 2-entry LUT 16x64x64 602 -> 569 us
    # by this alone, 293 us with np.interp in blocks (see pydla.hw.lut.INTERP_BLOCK).
    if lut is not None and ew is None:
        def lookup(flying: Array | None, folded: bool) -> None:
            if flying is not None or folded:
                execute(flying, folded)
                return
            lut(src, dst)
        return lookup
    if ew is not None and not ew[2] and lut is None and (act == "none" or fast is not None):
        combine = compute.ELTWISE_UFUNCS[ew[0]]
        operand = ew[1]

        def combined(flying: Array | None, folded: bool) -> None:
            if flying is not None or folded:
                execute(flying, folded)
                return
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                combine(src, operand, out=dst)  # numpy reads overlapping inputs before writing
            if act != "none" and fast is not None:
                fast(dst, dst)
        return combined
    return execute


def _flying(execute: Callable[[Array | None, bool], None], fast: Callable[[Array, Array], object],
            dst: Array, dims: tuple[int, int, int], *, plain: bool) -> Callable[[Array | None, bool], None]:
    """SDP after a convolution, when all it does is an activation of one numpy call (none, ReLU,
    clamp) into float32 memory, with its bias and element-wise ADD folded into the convolution (or
    none to fold): the activation from the flying result into the destination, in place when they
    are the same memory. Whether they are is found once per flying array (the convolution's plan
    hands the same array every run), instead of 4 memory-overlap and address queries per run in
    ``execute``; anything else goes to ``execute``. The same numpy calls on the same arrays: the
    same bits.
    """
    known: list[Array | bool | None] = [None, False]  # the last flying array; whether it overlaps dst

    def run(flying: Array | None, folded: bool) -> None:
        if flying is None or not (folded or plain):
            execute(flying, folded)
            return
        if flying is not known[0]:
            if flying.shape != dims or flying.dtype != F32:
                execute(flying, folded)  # reports the mismatch, or converts
                return
            known[0], known[1] = flying, bool(np.may_share_memory(flying, dst))
        if known[1]:
            fast(flying, flying)
            np.copyto(dst, flying)  # nothing when they are the same view (numpy sees it)
        else:
            fast(flying, dst)
    return run


def _f32_activation(act: str | None, clip_min: float, clip_max: float,
                    size: int) -> Callable[[Array, Array], object] | None:
    """The activation as one numpy call on float32 arrays (x into out, of one shape), for those that
    are one (none, relu, clamp with ordered bounds); None for the others. As compute.activation: NaN
    stays NaN; np.clip is the faster ReLU on large arrays, np.maximum on small ones."""
    if act == "none":
        return lambda x, out: np.copyto(out, x)
    if act == "relu":
        zero, inf = np.float32(0), np.float32(np.inf)
        if size >= compute.CLIP_MIN_SIZE:
            return lambda x, out: np.clip(x, zero, inf, out=out)
        return lambda x, out: np.maximum(x, zero, out=out)
    if act == "clamp" and clip_min <= clip_max:
        lo, hi = np.float32(clip_min), np.float32(clip_max)
        return lambda x, out: np.clip(x, lo, hi, out=out)
    return None


def _eltwise(x: Array, ew: tuple[str, Array, bool], dims: tuple[int, int, int]) -> Array:
    """SDP's element-wise stage: x op y (y op x when swapped); the result (x itself, or new)."""
    op, y, swap = ew
    if np.may_share_memory(x, y) and not (y.shape == x.shape and y.strides == x.strides
                                          and y.ctypes.data == x.ctypes.data):
        y = y.copy()  # x may be SDP's destination itself: never read what was just written
    if swap:
        result: Array = compute.eltwise(np.broadcast_to(y, dims).astype(np.float32), x, op)  # type: ignore[arg-type]
        return result
    compute.eltwise(x, y, op, out=x)  # type: ignore[arg-type]
    return x


def _decode_lut(r: R.sdp_regs_t, mem: ContextMemory) -> Callable[[Array, Array], None]:
    """Linear interpolation in a table of d_lut_entries f32 values over [d_lut_start, d_lut_end]:
    a function of x and the float32 array the result goes to (x itself, or another of x's shape)."""
    n, start, end = r.d_lut_entries, f32(r.d_lut_start), f32(r.d_lut_end)
    _bad(not 2 <= n <= 257, f"SDP: LUT of {n} entries (2..257)")
    _bad(not (np.isfinite(start) and np.isfinite(end) and start < end),
         f"SDP: LUT range {start}..{end}")
    table = mem.vector(addr(r.d_lut_addr_lo, r.d_lut_addr_hi), n, np.dtype(np.float32))
    if n >= LUT_INDEXED_MIN_ENTRIES:
        indexed = Interpolator(table, start, end)  # np.interp's results, without its binary search

        def interpolate_indexed(x: Array, out: Array) -> None:
            if out is not x:
                np.copyto(out, x, casting="same_kind")
            indexed(out)
        return interpolate_indexed
    grid = np.linspace(start, end, n)

    def interpolate(x: Array, out: Array) -> None:
        interp_blocks(x, grid, table.astype(np.float64), out)  # the table as it is now
    return interpolate
