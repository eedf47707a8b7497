"""The surface checks of a task's operations: every cube and memory reference of an operation inside
the buffer its address-list entry names, with dimensions, strides, precisions, kernels and sizes the
device takes (:func:`_check_surfaces`, called by :func:`pydla.firmware.graph.load_task` for each
operation once the graph itself is checked).

Usage: ``_check_surfaces(op, task, config, "task 3")`` raises DlaError naming the operation and field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.firmware.interface import DeviceCaps, TaskDesc

if TYPE_CHECKING:
    from pydla.firmware.graph import Operation

ELEMENT = {int(R.dla_precision_e.FP32): 4, int(R.dla_precision_e.FP16): 2}


def _cube_extent(c: Any, element: int) -> int:
    extent = (c.channels - 1) * c.surf_stride + (c.height - 1) * c.line_stride + c.width * element
    return int(extent)


def _check_ref(task: TaskDesc, ref: Any, need: int, what: str, align: int = 1) -> None:
    """A dla_mem_ref_t / dla_data_cube_t inside its buffer, holding at least ``need`` bytes, at a
    device address that is a multiple of ``align``."""
    entry = task.entry(ref.address, what)
    if (entry.offset + ref.offset) % align:
        raise DlaError(NvError.BadValue,
                       f"{what}: offset {ref.offset} (+ {entry.offset} in the address list) is not a "
                       f"multiple of the {align}-byte element")
    if ref.size < need:
        raise DlaError(NvError.InvalidSize, f"{what}: size {ref.size} is less than the {need} bytes "
                                            "its dimensions and strides span")
    if ref.offset + ref.size > entry.size:
        raise DlaError(NvError.InvalidSize,
                       f"{what}: offset {ref.offset} + size {ref.size} exceeds address-list entry "
                       f"{ref.address} ({entry.size} bytes from its offset)")


def _check_cube(task: TaskDesc, c: Any, element: int, what: str, max_bytes: int) -> None:
    dims = (c.channels, c.height, c.width)
    if not all(0 < d <= 1 << 16 for d in dims):
        raise DlaError(NvError.BadValue, f"{what}: dimensions C,H,W = {dims} must be 1..65536")
    if c.offset % element or c.line_stride % element or c.surf_stride % element:
        raise DlaError(NvError.BadValue,
                       f"{what}: offset {c.offset}, line_stride {c.line_stride} and surf_stride "
                       f"{c.surf_stride} must be multiples of the {element}-byte element")
    if c.line_stride < c.width * element or (c.channels > 1 and c.surf_stride == 0):
        raise DlaError(NvError.BadValue,
                       f"{what}: line_stride {c.line_stride} / surf_stride {c.surf_stride} are too "
                       f"small for width {c.width} of {element}-byte elements")
    # The device computes in float32 over the logical cube: bound that, not only the bytes it spans
    # (overlapping strides would make a small buffer a huge cube).
    if c.channels * c.height * c.width * 4 > max_bytes:
        raise DlaError(NvError.BadValue, f"{what}: a {c.channels}x{c.height}x{c.width} cube exceeds "
                                         f"{max_bytes} bytes per operation")
    _check_no_overlap(c, element, what)
    _check_ref(task, c, _cube_extent(c, element), what, element)


def _check_no_overlap(c: Any, element: int, what: str) -> None:
    """No two elements of the cube at the same bytes. Planar (C, H, W) and channel-interleaved layouts
    pass; a surf_stride that puts one channel's lines over another's does not. Checked with the
    dimensions ordered by stride: each stride must clear everything the inner dimensions span."""
    dims = sorted((stride, n) for stride, n in ((c.surf_stride, c.channels), (c.line_stride, c.height),
                                                (element, c.width)) if n > 1)
    span = element
    for stride, n in dims:
        if stride < span:
            raise DlaError(NvError.BadValue,
                           f"{what}: line_stride {c.line_stride} and surf_stride {c.surf_stride} make "
                           f"elements of the {c.channels}x{c.height}x{c.width} cube overlap")
        span = stride * (n - 1) + span


def _precision(p: int, config: DeviceCaps, what: str) -> int:
    if p not in ELEMENT:
        raise DlaError(NvError.BadValue, f"{what}: precision {p} is unknown")
    if p not in config.precisions:
        raise DlaError(NvError.NotSupported,
                       f"{what}: precision {R.dla_precision_e(p).name} is not supported by device "
                       f"config '{config.name}'")
    return ELEMENT[p]


def _check_surfaces(op: Operation, task: TaskDesc, config: DeviceCaps, where: str) -> None:
    max_bytes, max_kernel, max_stride = config.max_bytes_per_op, config.max_kernel, config.max_stride
    at = f"{where}: {op.name}"
    d, s = op.op, op.surface
    for name, _ in s._fields_:
        # Every address the KMD will resolve, used by the operation's mode or not, is in range.
        ref = getattr(s, name)
        if ref.address != -1:
            task.entry(ref.address, f"{at}: {name}")
    if op.block == dla_block_e.BDMA:
        shape = (d.surf_repeat, d.line_repeat, d.line_size)
        if not all(0 < v <= 1 << 30 for v in shape) or shape[0] * shape[1] * shape[2] > max_bytes:
            raise DlaError(NvError.BadValue, f"{at}: surf_repeat, line_repeat, line_size = {shape}: "
                                             f"at most {max_bytes} bytes per operation")
        for ref, ls, ss, name in ((s.src, d.src_line_stride, d.src_surf_stride, "src"),
                                  (s.dst, d.dst_line_stride, d.dst_surf_stride, "dst")):
            need = (shape[0] - 1) * ss + (shape[1] - 1) * ls + shape[2]
            _check_ref(task, ref, need, f"{at}: {name}")
    elif op.block == dla_block_e.CONV:
        el = _precision(d.precision, config, f"{at}: precision")
        _check_cube(task, s.src, el, f"{at}: src", max_bytes)
        if d.mode not in (R.conv_mode_e.DIRECT, R.conv_mode_e.DECONV):
            raise DlaError(NvError.BadValue, f"{at}: mode {d.mode} is unknown")
        if d.weight_format not in R.conv_weight_format_e._value2member_map_ or (
                d.mode == R.conv_mode_e.DECONV and d.weight_format != R.conv_weight_format_e.KCRS):
            raise DlaError(NvError.BadValue, f"{at}: weight_format {d.weight_format} (KCRS, or RSKC for a "
                                             "direct convolution)")
        dims = (d.kernels, d.kernel_channels, d.kernel_height, d.kernel_width, d.groups)
        if not all(0 < v <= 1 << 16 for v in dims):
            raise DlaError(NvError.BadValue,
                           f"{at}: kernels, kernel_channels, kernel_height, kernel_width, groups = {dims}")
        steps = (d.stride_x, d.stride_y, d.dilation_x, d.dilation_y)
        if not all(0 < v <= max_stride for v in steps) or max(d.kernel_height, d.kernel_width) > max_kernel:
            raise DlaError(NvError.BadValue, f"{at}: strides and dilations {steps} (1..{max_stride}) or "
                                             f"kernel {d.kernel_height}x{d.kernel_width} (<= {max_kernel})")
        out_bytes = d.kernels * d.out_height * d.out_width * 4
        if out_bytes > max_bytes or max(d.out_height, d.out_width) > 1 << 16:
            raise DlaError(NvError.BadValue, f"{at}: output {d.kernels}x{d.out_height}x{d.out_width} is too "
                                             "large for one operation")
        count = (s.src.channels if d.mode == R.conv_mode_e.DECONV else d.kernels) * d.kernel_channels
        _check_ref(task, s.weight, count * d.kernel_height * d.kernel_width * el, f"{at}: weight", el)
    elif op.block == dla_block_e.SDP:
        el = _precision(d.precision, config, f"{at}: precision")
        out_el = _precision(d.out_precision, config, f"{at}: out_precision")
        if d.src_mode == R.sdp_src_mode_e.MEMORY:
            _check_cube(task, s.src, el, f"{at}: src", max_bytes)
        _check_cube(task, s.dst, out_el, f"{at}: dst", max_bytes)
        c = s.src.channels
        for enabled, ref, name in ((d.bias_enable, s.bias, "bias"), (d.bn_enable, s.scale, "scale"),
                                   (d.bn_enable, s.shift, "shift"),
                                   (d.act == R.sdp_act_e.PRELU, s.prelu, "prelu")):
            if enabled:
                _check_ref(task, ref, c * el, f"{at}: {name}", el)
        if d.ew_op != R.sdp_ew_op_e.NONE:
            if d.ew_mode == R.sdp_ew_mode_e.CUBE:
                _check_cube(task, s.ew, el, f"{at}: ew", max_bytes)
            else:
                n = c if d.ew_mode == R.sdp_ew_mode_e.PER_CHANNEL else 1
                _check_ref(task, s.ew, n * el, f"{at}: ew", el)
    else:
        el = _precision(d.precision, config, f"{at}: precision")
        _check_cube(task, s.src, el, f"{at}: src", max_bytes)
        _check_cube(task, s.dst, el, f"{at}: dst", max_bytes)
        if op.block == dla_block_e.PDP:
            k = (d.kernel_height, d.kernel_width)
            if max(k) > max_kernel or not all(0 < v <= max_stride for v in (d.stride_x, d.stride_y)):
                raise DlaError(NvError.BadValue, f"{at}: kernel {k} (<= {max_kernel}) or strides "
                                                 f"({d.stride_y}, {d.stride_x}) (1..{max_stride})")
