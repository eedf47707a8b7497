"""Every field of an NVDLA operation that the register programming uses, checked against its table,
its memory and the configuration (docs/development/nvdla/firmware.md, "What pydla's scheduler must
add"): NVIDIA's firmware trusts most of them; pydla refuses a bad one with a DlaError naming the
operation, the field and the value, before any register is written.
"""

from __future__ import annotations

from typing import Any

from pydla.deviceapi.generated import dla_interface as I
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.firmware.graph import Operation
from pydla.firmware.interface import NvdlaFacts, TaskDesc

MAX_DIM = 8192
MAX_BDMA_REPEAT = 8192
HW = int(I.dla_mem_e.HW)
FEATURE = int(I.format_e.FEATURE)
LRN_SIZES = (3, 5, 7, 9)


class _Checker:
    def __init__(self, op: Operation, task: TaskDesc, facts: NvdlaFacts, where: str):
        self.op, self.task, self.facts = op, task, facts
        self.at = f"{where}: {op.name}"

    def fail(self, field: str, value: object, why: str, code: NvError = NvError.BadValue) -> DlaError:
        return DlaError(code, f"{self.at}: {field} = {value}: {why}")

    def enum(self, obj: Any, field: str, allowed: range | tuple[int, ...], prefix: str = "") -> int:
        value = int(getattr(obj, field))
        if value not in allowed:
            raise self.fail(prefix + field, value, f"must be one of {list(allowed)}")
        return value

    def precision(self, obj: Any, field: str) -> int:
        p = self.enum(obj, field, (0, 1, 2))
        if p not in self.facts.precisions:
            raise self.fail(field, I.precision_e(p).name, "this configuration does not have it "
                            f"(it has {', '.join(I.precision_e(q).name for q in self.facts.precisions)})",
                            NvError.NotSupported)
        return p

    def memory(self, name: str, index: int, offset: int, extent: int) -> None:
        """``extent`` bytes at ``offset`` of address-list entry ``index`` are inside that entry."""
        entry = self.task.entry(index, f"{self.at}: {name}.address")
        if offset + extent > entry.size:
            raise self.fail(f"{name}.address", index, f"{extent} bytes at offset {offset} run past the "
                            f"{entry.size} bytes of that address-list entry", NvError.InvalidSize)

    def cube(self, cube: Any, name: str, bpe: int, *, on_the_fly: bool = False, feature: bool = True) -> None:
        """A data cube: type known, HW only where allowed; in memory: dims 1..8192, strides that
        hold a line and a surface, and its whole extent inside its address-list entry."""
        kind = self.enum(cube, "type", (0, 1, 2), f"{name}.")
        for dim in ("width", "height", "channel"):
            v = int(getattr(cube, dim))
            if not 1 <= v <= MAX_DIM:
                raise self.fail(f"{name}.{dim}", v, f"must be 1..{MAX_DIM}")
        if kind == HW:
            if not on_the_fly:
                raise self.fail(f"{name}.type", "HW", "this cube must be in memory (MC or CV)")
            return
        atom = self.facts.atom
        if feature:
            line = cube.width * atom
            surfaces = -(-cube.channel * bpe // atom)
            thin = surfaces > 1 and cube.surf_stride < cube.line_stride * cube.height
            if cube.line_stride < line or thin:
                raise self.fail(f"{name}.line_stride/surf_stride", (cube.line_stride, cube.surf_stride),
                                f"too small for a {cube.width}x{cube.height}x{cube.channel} cube of "
                                f"{atom}-byte atoms")
            extent = (surfaces - 1) * cube.surf_stride + (cube.height - 1) * cube.line_stride + line
        else:
            extent = max(1, int(cube.size))
        offset = int(getattr(cube, "offset", 0))  # interfaces before 0.12 have none
        self.memory(name, int(cube.address), offset, extent)


def _bpe(precision: int) -> int:
    return 1 if precision == I.precision_e.INT8 else 2


def check_operation(op: Operation, task: TaskDesc, facts: NvdlaFacts, where: str) -> None:
    """Check ``op``'s descriptors (raise DlaError on the first bad field)."""
    c = _Checker(op, task, facts, where)
    _CHECKS[op.block](c, op.op, op.surface)


def _bdma(c: _Checker, d: Any, s: Any) -> None:
    n = int(s.num_transfers)
    if n > I.NUM_MAX_BDMA_OPS:
        raise c.fail("num_transfers", n, f"at most {I.NUM_MAX_BDMA_OPS}")
    c.enum(s, "source_type", (0, 1))
    c.enum(s, "destination_type", (0, 1))
    for i in range(n):
        t, name = s.transfers[i], f"transfers[{i}]"
        for field in ("line_repeat", "surface_repeat"):
            v = int(getattr(t, field))
            if not 1 <= v <= MAX_BDMA_REPEAT:
                raise c.fail(f"{name}.{field}", v, f"must be 1..{MAX_BDMA_REPEAT}")
        if t.line_size == 0 or t.line_size % 32 or t.line_size // 32 > 1 << 13:
            raise c.fail(f"{name}.line_size", t.line_size, "must be a non-zero multiple of 32")
        for side in ("source", "destination"):
            line, surface = int(getattr(t, f"{side}_line")), int(getattr(t, f"{side}_surface"))
            if line < t.line_size:
                raise c.fail(f"{name}.{side}_line", line, f"below line_size {t.line_size}")
            if surface < line * t.line_repeat:
                raise c.fail(f"{name}.{side}_surface", surface, f"below {side}_line x line_repeat")
            extent = (t.surface_repeat - 1) * surface + (t.line_repeat - 1) * line + t.line_size
            c.memory(f"{name}.{side}", int(getattr(t, f"{side}_address")), 0, extent)


def _conv(c: _Checker, d: Any, s: Any) -> None:
    c.enum(d, "conv_mode", (0, 1))
    if d.conv_mode == I.dla_conv_mode.WINOGRAD and not c.facts.winograd:
        raise c.fail("conv_mode", "WINOGRAD", "this configuration has no Winograd", NvError.NotSupported)
    fmt = c.enum(d, "data_format", range(0, FEATURE + 1))
    c.enum(d, "pixel_mapping", (0,))
    c.enum(d, "weight_format", (0, 1))
    if d.weight_format == I.weight_format_e.COMPRESSED and not c.facts.weight_compression:
        raise c.fail("weight_format", "COMPRESSED", "this configuration has no weight compression",
                     NvError.NotSupported)
    c.enum(d, "mean_format", (0, 1))
    c.enum(d, "pixel_override", (0, 1))
    p_in = c.precision(d, "in_precision")
    c.precision(d, "out_precision")
    if d.out_cvt.scale != 1 or d.out_cvt.offset != 0:
        raise c.fail("out_cvt", (d.out_cvt.scale, d.out_cvt.offset), "CACC only truncates: scale must be 1 "
                     "and offset 0")
    for field in ("batch", "entry_per_slice", "fetch_grain", "release", "data_bank", "weight_bank",
                  "conv_stride_x", "conv_stride_y", "dilation_x", "dilation_y", "input_width_csc",
                  "input_height_csc", "input_channel_csc", "kernel_width_csc", "kernel_height_csc",
                  "kernel_channel_csc", "input_width_cmac", "input_height_cmac", "bytes_per_kernel"):
        if int(getattr(d, field)) < 1:
            raise c.fail(field, int(getattr(d, field)), "must be at least 1 (its register takes it minus 1)")
    c.cube(s.src_data, "src_data", _bpe(p_in), feature=fmt == FEATURE)
    c.cube(s.dst_data, "dst_data", 1, on_the_fly=True)
    if s.dst_data.type != HW:
        raise c.fail("dst_data.type", s.dst_data.type, "CACC's output goes to the SDP on the fly (HW, 2)")
    c.cube(s.weight_data, "weight_data", 1, feature=False)
    if d.weight_format == I.weight_format_e.COMPRESSED:
        c.cube(s.wmb_data, "wmb_data", 1, feature=False)
        c.cube(s.wgs_data, "wgs_data", 1, feature=False)


def _operand(c: _Checker, x: Any, name: str, cube: Any, channels: int) -> None:
    for field, allowed in (("alu_type", range(4)), ("type", range(4)), ("mode", range(3)),
                           ("act", range(4))):
        c.enum(x, field, allowed, f"{name}.")
    if not x.enable:
        return
    bpe = _bpe(c.precision(x, "precision"))
    if x.type == I.sdp_op_e.NONE or x.mode == I.sdp_op_mode_e.PER_LAYER:
        return
    data = name.replace("_op", "_data")
    per = bpe * (2 if x.type == I.sdp_op_e.BOTH else 1)  # an ALU and a MUL operand per value for BOTH
    if x.mode == I.sdp_op_mode_e.PER_KERNEL:  # one value per channel of the SDP's input, packed
        c.enum(cube, "type", (0, 1), f"{data}.")
        c.memory(data, int(cube.address), int(getattr(cube, "offset", 0)), channels * per)
    else:
        c.cube(cube, data, per)


def _sdp(c: _Checker, d: Any, s: Any) -> None:
    src_p, dst_p = c.precision(d, "src_precision"), c.precision(d, "dst_precision")
    c.enum(d, "conv_mode", (0, 1))
    if d.batch_num < 1:
        raise c.fail("batch_num", d.batch_num, "must be at least 1")
    c.cube(s.src_data, "src_data", _bpe(src_p), on_the_fly=True)
    c.cube(s.dst_data, "dst_data", _bpe(dst_p), on_the_fly=True)
    if d.lut_index != -1 and not c.facts.sdp_lut:
        raise c.fail("lut_index", d.lut_index, "this configuration's SDP has no LUT", NvError.NotSupported)
    if d.y_op.enable and not c.facts.sdp_y:
        raise c.fail("y_op.enable", 1, "this configuration's SDP has no Y stage", NvError.NotSupported)
    for x, name, cube in ((d.x1_op, "x1_op", s.x1_data), (d.x2_op, "x2_op", s.x2_data),
                          (d.y_op, "y_op", s.y_data)):
        _operand(c, x, name, cube, int(s.src_data.channel))


def _pdp(c: _Checker, d: Any, s: Any) -> None:
    p = c.precision(d, "precision")
    c.enum(d, "pool_mode", (0, 1, 2))
    for field, low, high in (("pool_width", 0, 7), ("pool_height", 0, 7), ("stride_x", 1, 8),
                             ("stride_y", 1, 8), ("split_num", 1, 64)):
        v = int(getattr(d, field))
        if not low <= v <= high:
            raise c.fail(field, v, f"must be {low}..{high}")
    if p == I.precision_e.FP16 and any(d.padding_value[i] for i in range(I.PDP_PAD_VAL_NUM)):
        raise c.fail("padding_value", list(d.padding_value), "must be 0 for FP16")
    c.cube(s.src_data, "src_data", _bpe(p), on_the_fly=True)
    c.cube(s.dst_data, "dst_data", _bpe(p))
    if s.src_data.type == HW and d.split_num != 1:
        raise c.fail("split_num", d.split_num, "an on-the-fly input is not split (1)")


def _cdp(c: _Checker, d: Any, s: Any) -> None:
    p_in, p_out = c.precision(d, "in_precision"), c.precision(d, "out_precision")
    if p_in != p_out:
        raise c.fail("out_precision", p_out, f"must equal in_precision {p_in}")
    if d.local_size not in LRN_SIZES:
        raise c.fail("local_size", d.local_size, f"must be one of {list(LRN_SIZES)}")
    c.cube(s.src_data, "src_data", _bpe(p_in))
    c.cube(s.dst_data, "dst_data", _bpe(p_out))


def _rubik(c: _Checker, d: Any, s: Any) -> None:
    p = c.precision(d, "precision")
    mode = c.enum(d, "mode", (0, 1, 2))
    for field in ("stride_x", "stride_y"):
        v = int(getattr(d, field))
        if mode == I.dla_rubik_mode.CONTRACT and not 1 <= v <= 32:
            raise c.fail(field, v, "must be 1..32 for a contract")
    if mode == I.dla_rubik_mode.MERGE and (s.src_data.plane_stride == 0 or s.src_data.plane_stride % 32):
        raise c.fail("src_data.plane_stride", s.src_data.plane_stride, "merge: a multiple of 32, not 0")
    if mode == I.dla_rubik_mode.SPLIT and (s.dst_data.plane_stride == 0 or s.dst_data.plane_stride % 32):
        raise c.fail("dst_data.plane_stride", s.dst_data.plane_stride, "split: a multiple of 32, not 0")
    c.cube(s.src_data, "src_data", _bpe(p), feature=mode != I.dla_rubik_mode.MERGE)
    c.cube(s.dst_data, "dst_data", _bpe(p), feature=mode != I.dla_rubik_mode.SPLIT)


_CHECKS = {dla_block_e.BDMA: _bdma, dla_block_e.CONV: _conv, dla_block_e.SDP: _sdp,
           dla_block_e.PDP: _pdp, dla_block_e.CDP: _cdp, dla_block_e.RUBIK: _rubik}
