"""The functional blocks: each computes one operation from its register group and device memory.

A block function receives a snapshot of the group's registers (the generated ``<block>_regs_t``
ctypes struct) and a :class:`ContextMemory` through which every access is translated by the IOMMU.
It raises :class:`HwError` for a bad configuration and lets :class:`MmuFault` through; the device
turns both into error status and interrupts.

Each block is split in two: ``decode_<block>`` checks the registers, makes the memory views and
chooses the kernel, and returns the operation as a function that computes; ``run_<block>`` does
both. The device keeps decoded operations by their register bytes (see :mod:`pydla.hw.decoded`):
what a decode returns depends only on the registers and the context's mappings, never on the data.

The native feature layout is planar CHW (see ``cube_regs_t``): element (c, h, w) of a cube lives at
``addr + c*surf_stride + h*line_stride + w*element_size``. It was chosen over NVDLA's channel-packed
atoms because numpy works on it without copies: a cube is one strided view, the im2col matmul of a
convolution produces channel-major results that land in it directly, a graph's NCHW tensors need
no conversion, and concatenation or slicing along any axis is only a different address and stride.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.hw import compute, conv
from pydla.hw.blockio import DTYPES, F32, MAX_DIM, Array, ContextMemory, HwError, addr, f32, f32_bits
from pydla.hw.blockio import bad_config as _bad
from pydla.hw.conv_shift import plan_shift_gemm
from pydla.hw.sdp import decode_sdp, run_sdp
from pydla.target.config import MAX_BYTES_PER_OP, MAX_KERNEL, MAX_STRIDE

__all__ = ["DTYPES", "F32", "MAX_DIM", "Array", "ContextMemory", "HwError", "addr", "decode_bdma",
           "decode_conv", "decode_pdp", "decode_sdp", "f32", "f32_bits", "flying_destination", "run_bdma",
           "run_cdp", "run_conv", "run_pdp", "run_rubik", "run_sdp", "sdp_addends"]


# -- BDMA ---------------------------------------------------------------------------------------------


def run_bdma(r: R.bdma_regs_t, mem: ContextMemory) -> None:
    decode_bdma(r, mem)()


def decode_bdma(r: R.bdma_regs_t, mem: ContextMemory) -> Callable[[], None]:
    shape = (r.d_surf_repeat, r.d_line_repeat, r.d_line_size)
    _bad(not all(0 < n <= 1 << 30 for n in shape) or shape[0] * shape[1] * shape[2] > MAX_BYTES_PER_OP,
         f"BDMA: surfaces, lines, bytes = {shape} (at most {MAX_BYTES_PER_OP} bytes per operation)")
    u8 = np.dtype(np.uint8)
    src = mem.strided(addr(r.d_src_addr_lo, r.d_src_addr_hi), shape,
                      (r.d_src_surf_stride, r.d_src_line_stride, 1), u8)
    dst = mem.strided(addr(r.d_dst_addr_lo, r.d_dst_addr_hi), shape,
                      (r.d_dst_surf_stride, r.d_dst_line_stride, 1), u8)
    src, dst = _widest(src, dst)
    copy = np.copyto

    def execute() -> None:
        copy(dst, src)
    return execute


def _widest(src: Array, dst: Array) -> tuple[Array, Array]:
    """Two (surfaces, lines, bytes) uint8 views as the same bytes in the widest unsigned items (8, 4
    or 2 bytes) the line length and both views' strides and addresses allow, and without the last
    axis when a line is one item: numpy then copies a line in one step instead of byte by byte.
    Squeeze-excite's scale spread over every pixel (MobileNet-v3-small at 128x128: 4-byte lines,
    source line stride 0; ``bench/bench_kernels.py --kernel bdma``, medians, load average 9): 16x1024
    lines 99.6 -> 3.3 us, 240x64 70.2 -> 2.3 us, 576x16 42.9 -> 2.8 us. A copy of the same bytes:
    the same result."""
    for size, kind in ((8, np.uint64), (4, np.uint32), (2, np.uint16)):
        if src.shape[2] % size == 0 and all(a.strides[0] % size == 0 and a.strides[1] % size == 0
                                            and a.ctypes.data % size == 0 for a in (src, dst)):
            wide = src.view(kind), dst.view(kind)
            return (wide[0][:, :, 0], wide[1][:, :, 0]) if wide[0].shape[2] == 1 else wide
    return src, dst


# -- CONV (+ SDP) ---------------------------------------------------------------------------------------


def flying_destination(conv: R.conv_regs_t, sdp: R.sdp_regs_t, mem: ContextMemory) -> Array | None:
    """SDP's float32 destination, when the convolution can write its result there directly (it
    then needs neither a temporary nor a final copy); None when SDP must convert or the layout or
    dimensions do not allow it."""
    if (sdp.d_src_mode != R.sdp_src_mode_e.FLYING or sdp.d_out_precision != R.dla_precision_e.FP32
            or sdp.d_act == R.sdp_act_e.LUT
            or (sdp.d_dst.channels, sdp.d_dst.height, sdp.d_dst.width)
            != (conv.d_wt_kernels, conv.d_out_height, conv.d_out_width)):
        return None
    try:
        dst = mem.cube(sdp.d_dst, DTYPES[int(R.dla_precision_e.FP32)], "SDP destination")
        # An operand SDP still has to read in that memory (an in-place residual ``y += conv(x)``,
        # a bias inside the output...) would be overwritten by the convolution before SDP reads it.
        if any(np.may_share_memory(dst, operand) for operand in _sdp_operands(sdp, mem)):
            return None
        return dst
    except Exception:
        return None  # SDP reports the problem itself when it runs


def _sdp_operands(r: R.sdp_regs_t, mem: ContextMemory) -> list[Array]:
    """The memory SDP reads besides its source, as run_sdp reads it."""
    dtype = mem.dtype(r.d_precision, "SDP")
    c = r.d_src.channels
    dims = (c, r.d_src.height, r.d_src.width)
    operands = []
    if r.d_bias_enable:
        operands.append(mem.vector(addr(r.d_bias_addr_lo, r.d_bias_addr_hi), c, dtype))
    if r.d_bn_enable:
        operands.append(mem.vector(addr(r.d_scale_addr_lo, r.d_scale_addr_hi), c, dtype))
        operands.append(mem.vector(addr(r.d_shift_addr_lo, r.d_shift_addr_hi), c, dtype))
    if r.d_ew_op != R.sdp_ew_op_e.NONE:
        ew_addr = addr(r.d_ew_addr_lo, r.d_ew_addr_hi)
        if r.d_ew_mode == R.sdp_ew_mode_e.CUBE:
            operands.append(mem.strided(ew_addr, dims, (r.d_ew_surf_stride, r.d_ew_line_stride,
                                                        dtype.itemsize), dtype))
        else:
            n = c if r.d_ew_mode == R.sdp_ew_mode_e.PER_CHANNEL else 1
            operands.append(mem.vector(ew_addr, n, dtype))
    if r.d_act == R.sdp_act_e.PRELU:
        operands.append(mem.vector(addr(r.d_prelu_addr_lo, r.d_prelu_addr_hi), c, dtype))
    return operands


def sdp_addends(conv: R.conv_regs_t, sdp: R.sdp_regs_t, mem: ContextMemory) -> list[Array] | None:
    """What a flying SDP adds to the convolution's result before anything else: its bias and the
    operand of an element-wise ADD. The convolution starts its accumulation from their sum, which
    saves SDP a pass over the result per operand (NVDLA's pipeline makes none). None when SDP does
    something else first (batch norm, another element-wise op) or a register is not what SDP can use
    (SDP then reports it itself)."""
    if (sdp.d_src_mode != R.sdp_src_mode_e.FLYING or sdp.d_bn_enable
            or sdp.d_ew_op not in (R.sdp_ew_op_e.NONE, R.sdp_ew_op_e.ADD)
            or (not sdp.d_bias_enable and sdp.d_ew_op == R.sdp_ew_op_e.NONE)
            or (sdp.d_src.channels, sdp.d_src.height, sdp.d_src.width)
            != (conv.d_wt_kernels, conv.d_out_height, conv.d_out_width)):
        return None
    try:
        dtype = mem.dtype(sdp.d_precision, "SDP")
        c = sdp.d_src.channels
        dims = (c, sdp.d_src.height, sdp.d_src.width)
        addends = []
        if sdp.d_bias_enable:
            bias = mem.vector(addr(sdp.d_bias_addr_lo, sdp.d_bias_addr_hi), c, dtype)
            addends.append(bias.reshape(c, 1, 1))
        if sdp.d_ew_op == R.sdp_ew_op_e.ADD:
            ew_addr = addr(sdp.d_ew_addr_lo, sdp.d_ew_addr_hi)
            if sdp.d_ew_mode == R.sdp_ew_mode_e.CUBE:
                addends.append(mem.strided(ew_addr, dims, (sdp.d_ew_surf_stride, sdp.d_ew_line_stride,
                                                           dtype.itemsize), dtype))
            elif sdp.d_ew_mode == R.sdp_ew_mode_e.PER_CHANNEL:
                addends.append(mem.vector(ew_addr, c, dtype).reshape(c, 1, 1))
            elif sdp.d_ew_mode == R.sdp_ew_mode_e.SCALAR:
                addends.append(mem.vector(ew_addr, 1, dtype).reshape(1, 1, 1))
            else:
                return None
        return addends
    except Exception:
        return None  # SDP reports the problem itself when it runs


def run_conv(r: R.conv_regs_t, mem: ContextMemory, out: Array | None = None,
             addends: list[Array] | None = None) -> tuple[Array, bool]:
    """The convolution's float32 result (K, Ho, Wo), which flies to SDP, and whether ``addends``
    (see :func:`sdp_addends`) were added to it. The result is written into ``out`` (a float32 view
    of the right shape) unless that overlaps what the convolution reads, or the path used makes
    its own (tap-major weights)."""
    return decode_conv(r, mem, out, addends)()


def decode_conv(r: R.conv_regs_t, mem: ContextMemory, out: Array | None = None,
                addends: list[Array] | None = None) -> Callable[[], tuple[Array, bool]]:
    """:func:`run_conv`, decoded: the checks and views done, the kernel chosen."""
    dtype = mem.dtype(r.d_precision, "CONV")
    x = mem.cube(r.d_src, dtype, "CONV source")
    c_in = r.d_src.channels
    k, cg, kh, kw, groups = r.d_wt_kernels, r.d_wt_channels, r.d_wt_height, r.d_wt_width, r.d_groups
    _bad(not all(0 < v <= MAX_DIM for v in (k, cg, kh, kw, groups)),
         f"CONV: kernels, channels, height, width, groups = {(k, cg, kh, kw, groups)}")
    stride = (r.d_stride_y, r.d_stride_x)
    dilation = (r.d_dilation_y, r.d_dilation_x)
    _bad(not all(1 <= v <= MAX_STRIDE for v in (*stride, *dilation)) or max(kh, kw) > MAX_KERNEL,
         f"CONV: stride {stride}, dilation {dilation} (1..{MAX_STRIDE}) or kernel {kh}x{kw}")
    pads = (r.d_pad_top, r.d_pad_left, r.d_pad_bottom, r.d_pad_right)
    _bad(max(pads) > MAX_DIM, f"CONV: pads {pads}")
    out_hw = (r.d_out_height, r.d_out_width)
    _bad(max(out_hw) > MAX_DIM or k * out_hw[0] * out_hw[1] * 4 > MAX_BYTES_PER_OP,
         f"CONV: output {k}x{out_hw[0]}x{out_hw[1]} is too large for one operation")
    if r.d_mode == R.conv_mode_e.DIRECT:
        _bad(cg * groups != c_in or k % groups != 0,
             f"CONV: {c_in} input channels, {groups} groups of {cg} and {k} kernels do not agree")
        el = dtype.itemsize
        if r.d_wt_format == R.conv_weight_format_e.KCRS:
            strides = (cg * kh * kw * el, kh * kw * el, kw * el, el)
        elif r.d_wt_format == R.conv_weight_format_e.RSKC:
            strides = (cg * el, el, kw * k * cg * el, k * cg * el)
        else:
            raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"CONV: weight format {r.d_wt_format} is unknown")
        w = mem.strided(addr(r.d_wt_addr_lo, r.d_wt_addr_hi), (k, cg, kh, kw), strides, dtype)
        spans = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
        _bad(spans[0] > r.d_src.height + pads[0] + pads[2] or spans[1] > r.d_src.width + pads[1] + pads[3],
             f"CONV: kernel spans {spans} exceed the padded input "
             f"{(r.d_src.height + pads[0] + pads[2], r.d_src.width + pads[1] + pads[3])}")
        expect = tuple(compute.conv_output_size(n, kk, s, pb, pa, d) for n, kk, s, pb, pa, d in (
            (r.d_src.height, kh, stride[0], pads[0], pads[2], dilation[0]),
            (r.d_src.width, kw, stride[1], pads[1], pads[3], dilation[1])))
        _bad(expect != out_hw or min(expect) < 1,
             f"CONV: output {out_hw} in the registers, {expect} from the input and kernel")
        adds = tuple(addends or ())
        folded = bool(addends)
        if conv.shift_gemm_applies(w, groups):
            # Tap-major weights: accumulated BLAS products, started from SDP's addends; the result
            # is a view with padded lines, which SDP reads as it reads any flying result. Planned
            # here once where it can be (float32 weights, within the plans' memory bound).
            planned = plan_shift_gemm(x, w, stride, pads, dilation, out_hw, adds)
            if planned is not None:
                run_planned = planned

                def shift_planned() -> tuple[Array, bool]:
                    return run_planned(), folded
                return shift_planned

            def shift_gemm() -> tuple[Array, bool]:
                return conv.conv2d_shift_gemm(x, w, stride=stride, pads=pads, dilation=dilation,
                                              addends=adds), folded
            return shift_gemm
        into = None if out is None or np.may_share_memory(out, x) or np.may_share_memory(out, w) else out
        run = conv.plan_conv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups, out=into,
                               addends=adds, float32_result=True)

        def direct() -> tuple[Array, bool]:
            return run(), folded
        return direct
    if r.d_mode == R.conv_mode_e.DECONV:
        # ConvTranspose weights are (C_in, K/groups, kh, kw).
        _bad(c_in % groups != 0 or k % groups != 0 or cg * groups != k,
             f"CONV deconv: {c_in} input channels, {groups} groups, {k} output channels, "
             f"{cg} per group do not agree")
        w = mem.strided(addr(r.d_wt_addr_lo, r.d_wt_addr_hi), (c_in, cg, kh, kw),
                        (cg * kh * kw * dtype.itemsize, kh * kw * dtype.itemsize, kw * dtype.itemsize,
                         dtype.itemsize), dtype)
        out_pad = (r.d_out_pad_y, r.d_out_pad_x)
        expect = tuple(
            s * (n - 1) + op + ((kk - 1) * d + 1) - pb - pa
            for n, kk, s, pb, pa, d, op in (
                (r.d_src.height, kh, stride[0], pads[0], pads[2], dilation[0], out_pad[0]),
                (r.d_src.width, kw, stride[1], pads[1], pads[3], dilation[1], out_pad[1])))
        _bad(expect != out_hw or min(expect) < 1,
             f"CONV deconv: output {out_hw} in the registers, {expect} from the input and kernel")
        deconv_shape = (k, *out_hw)

        def deconv() -> tuple[Array, bool]:
            result = np.empty(deconv_shape, dtype=np.float32)
            compute.deconv2d(x, w, stride=stride, pads=pads, dilation=dilation, groups=groups,
                             output_padding=out_pad, out=result)
            return result, False
        return deconv
    raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"CONV: mode {r.d_mode} is unknown")


# -- PDP, CDP, RUBIK -----------------------------------------------------------------------------------

_POOL: dict[int, compute.PoolMethod] = {R.pdp_method_e.MAX: "max", R.pdp_method_e.AVG: "avg",
                                         R.pdp_method_e.MIN: "min"}


def run_pdp(r: R.pdp_regs_t, mem: ContextMemory) -> None:
    decode_pdp(r, mem)()


def decode_pdp(r: R.pdp_regs_t, mem: ContextMemory) -> Callable[[], None]:
    dtype = mem.dtype(r.d_precision, "PDP")
    x = mem.cube(r.d_src, dtype, "PDP source")
    dst = mem.cube(r.d_dst, dtype, "PDP destination")
    method = _POOL.get(r.d_method)
    _bad(method is None, f"PDP: method {r.d_method} is unknown")
    assert method is not None
    kernel = (r.d_kernel_height, r.d_kernel_width)
    stride = (r.d_stride_y, r.d_stride_x)
    pads = (r.d_pad_top, r.d_pad_left, r.d_pad_bottom, r.d_pad_right)
    _bad(max(kernel) > MAX_KERNEL or max(stride) > MAX_STRIDE,
         f"PDP: kernel {kernel} (<= {MAX_KERNEL}) or stride {stride} (<= {MAX_STRIDE})")
    _bad(min(*kernel, *stride) < 1 or max(pads[0], pads[2]) >= kernel[0]
         or max(pads[1], pads[3]) >= kernel[1],
         f"PDP: kernel {kernel}, stride {stride}, pads {pads} (a pad must be smaller than the kernel)")
    _bad(dst.shape[0] != x.shape[0], f"PDP: {x.shape[0]} channels in, {dst.shape[0]} out")
    for axis, name in ((1, "height"), (2, "width")):
        k, s, lo, hi = kernel[axis - 1], stride[axis - 1], pads[axis - 1], pads[axis + 1]
        floor_size = (x.shape[axis] + lo + hi - k) // s + 1
        ceil_size = -(-(x.shape[axis] + lo + hi - k) // s) + 1
        _bad(dst.shape[axis] not in (floor_size, ceil_size) or floor_size < 1,
             f"PDP: output {name} {dst.shape[axis]}, expected {floor_size} (or {ceil_size} rounding up)")
    include_pad, out_size = bool(r.d_count_include_pad), dst.shape[1:]

    def execute() -> None:
        compute.pool2d(x, kernel=kernel, stride=stride, pads=pads, method=method,
                       count_include_pad=include_pad, out_size=out_size, out=dst)
    return execute


def run_cdp(r: R.cdp_regs_t, mem: ContextMemory) -> None:
    dtype = mem.dtype(r.d_precision, "CDP")
    x = mem.cube(r.d_src, dtype, "CDP source")
    dst = mem.cube(r.d_dst, dtype, "CDP destination")
    _bad(dst.shape != x.shape, f"CDP: destination {dst.shape}, source {x.shape}")
    _bad(not 1 <= r.d_lrn_size <= 255, f"CDP: LRN size {r.d_lrn_size}")
    compute.lrn(x, size=r.d_lrn_size, alpha=f32(r.d_lrn_alpha), beta=f32(r.d_lrn_beta),
                bias=f32(r.d_lrn_bias), out=dst)


def run_rubik(r: R.rubik_regs_t, mem: ContextMemory) -> None:
    dtype = mem.dtype(r.d_precision, "RUBIK")
    x = mem.cube(r.d_src, dtype, "RUBIK source")
    dst = mem.cube(r.d_dst, dtype, "RUBIK destination")
    mode = r.d_mode
    if mode in (R.rubik_mode_e.CONTRACT, R.rubik_mode_e.SPACE_TO_DEPTH):
        by, bx = r.d_block_y, r.d_block_x
        _bad(not (0 < by <= 64 and 0 < bx <= 64), f"RUBIK: block {by}x{bx}")
        if mode == R.rubik_mode_e.CONTRACT:
            c, h, w = x.shape
            _bad(c % (by * bx) or dst.shape != (c // (by * bx), h * by, w * bx),
                 f"RUBIK contract: {x.shape} by {by}x{bx} cannot give {dst.shape}")
            result = compute.depth_to_space(x, by, bx, "DCR" if r.d_dcr else "CRD")
        else:
            c, h, w = x.shape
            _bad(h % by or w % bx or dst.shape != (c * by * bx, h // by, w // bx),
                 f"RUBIK space-to-depth: {x.shape} by {by}x{bx} cannot give {dst.shape}")
            result = compute.space_to_depth(x, by, bx)
        np.copyto(dst, result)
    elif mode == R.rubik_mode_e.TRANSPOSE:
        perm = tuple((r.d_perm >> (2 * i)) & 3 for i in range(3))
        _bad(sorted(perm) != [0, 1, 2], f"RUBIK transpose: permutation {perm} (register {r.d_perm:#x})")
        _bad(dst.shape != tuple(x.shape[p] for p in perm),
             f"RUBIK transpose: {x.shape} permuted by {perm} cannot give {dst.shape}")
        np.copyto(dst, np.transpose(x, perm))
    elif mode in (R.rubik_mode_e.SPLIT, R.rubik_mode_e.MERGE):
        _bad(dst.shape != x.shape, f"RUBIK split/merge: {x.shape} to {dst.shape}")
        np.copyto(dst, x)
    else:
        raise HwError(R.dla_hw_error_e.BAD_CONFIG, f"RUBIK: mode {mode} is unknown")
