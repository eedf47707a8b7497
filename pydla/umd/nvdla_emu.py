"""The NVDLA Loadable's EMU1 tasks (POWER, SOFTMAX) on the CPU, as NVIDIA's runtime emulator runs them.

An EMU task's address list is the runtime's: entry ``i`` is the task's address-list entry ``i`` (a
memory and an offset; None for SRAM, which the emulator cannot reach). Entry 0 holds the emulator's
network descriptor (``operation_desc_index`` s16, ``operation_buffer_desc_index`` s16,
``num_operations`` u16); the operation containers and buffer containers are at the address entries it
names. Two layouts of the emulator interface exist, both calling themselves version 0.0.1:

- 2018 (what NVIDIA's regression network NN_L0_0 was compiled with): a 16-byte operation container
  (``op_type`` u8, then POWER's ``power, scale, shift`` f32 at 1, 5, 9 or SOFTMAX's ``axis`` u8 at 1),
  a 256-byte buffer descriptor (``address_index`` s16, ``size`` u32, ``format`` u16, ``width``,
  ``height``, ``channel`` u16, ``line_stride``, ``surf_stride`` u32, packed), FP16 only (format 2).
- 2019: a 24-byte container (``op_type`` u8, ``input_scale_factor`` and ``output_scale_factor`` f32 at
  4 and 8, POWER's three f32 at 12, SOFTMAX's axis at 12), a ``address_index_offset`` u32 after the
  address index, formats INT8 0 (x32), INT8_8 1 (x8) and FF16 3.

The layout is told by the first source buffer descriptor: its format is valid in one layout only
(2018: 2 at byte 6; 2019: 0, 1 or 3 at byte 10; what the other layout reads there is a size or a
width); when both or neither read valid, by the bytes the operation list has (``24 * n`` or more is
2019: the compiler writes exactly ``n`` containers). The arithmetic is float32 as the emulator's C++ does it:
SOFTMAX reads ``channel`` consecutive elements (no strides), takes the max, sums ``expf(x - max)`` in
order, divides; POWER computes ``powf(shift + scale * x, power)`` per element with the cube's strides.
``expf``/``powf`` are evaluated in float64 and rounded once to float32 (the correctly rounded result,
what glibc's implementations return). Results are stored as half_float's ``half(float)`` does: round
to nearest, ties away from zero (:func:`float_to_half_bits`).

Usage::

    run_emu_task([(mem0, 0), (mem1, 0), ...], "task 2")
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.portability.interface import NvDlaMemHandle

EmuAddress = tuple[NvDlaMemHandle, int] | None  # (memory, offset), or None: not reachable (SRAM)
OP_POWER, OP_SOFTMAX = 0, 1
NETWORK_DESC_SIZE = 6  # of the 256-byte emu_network_desc, the bytes used
BUFFER_DESC_SIZE = 256
BUFFER_CONTAINER_SIZE = 2 * BUFFER_DESC_SIZE  # src, dst
CONTAINER_2018, CONTAINER_2019 = 16, 24
FORMAT_2018_FP16 = 2
FORMAT_INT8, FORMAT_INT8_8, FORMAT_FF16 = 0, 1, 3  # 2019 numbering
_BUFFER_2018 = struct.Struct("<hIHHHHII")
_BUFFER_2019 = struct.Struct("<hIIHHHHII")


def float_to_half_bits(x: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """float32 -> IEEE half bit patterns as half_float's table conversion makes them with
    round-to-nearest, ties away from zero: magnitudes in [2^-25, 2^-24) become the smallest
    subnormal, below that 0; overflow gives infinity; a NaN keeps its top 10 mantissa bits (so a NaN
    whose payload is only in the low 13 bits becomes infinity, as there)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    sign = (bits >> 16) & 0x8000
    exp = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    e = exp - 127
    base = np.where(e < -24, 0, np.where(e < -14, 0x0400 >> np.clip(-e - 14, 0, 31),
                                         np.where(e <= 15, (e + 15) << 10, 0x7C00)))
    shift = np.where(e < -24, 24, np.where(e < -14, -e - 1,
                                           np.where(e <= 15, 13, np.where(e == 128, 13, 24))))
    h = base + (mant >> shift)
    round_up = (((mant >> (shift - 1)) & 1) | (exp == 102)) & ((h & 0x7C00) != 0x7C00)
    out: npt.NDArray[np.uint16] = ((h + round_up) | sign).astype(np.uint16)
    return out


def half_bits_to_float(h: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """IEEE half bit patterns -> float32 (exact)."""
    return np.asarray(h, dtype=np.uint16).view(np.float16).astype(np.float32)


@dataclass(frozen=True)
class BufferDesc:
    """An emu_buffer_desc: where a cube is (an address index and offset) and its shape and strides."""

    address_index: int
    address_index_offset: int
    size: int
    format: int
    width: int
    height: int
    channel: int
    line_stride: int
    surf_stride: int


def _window(entry: EmuAddress, what: str) -> npt.NDArray[np.uint8]:
    """The bytes an address entry reaches: its memory from its offset to the end."""
    if entry is None:
        raise DlaError(NvError.NotSupported, f"EMU {what}: the memory is in SRAM, which the emulator cannot "
                                             f"reach")
    mem, offset = entry
    view = mem.bytes_view()
    if not 0 <= offset <= view.size:
        raise DlaError(NvError.InvalidSize, f"EMU {what}: offset {offset} is past the "
                                            f"{view.size}-byte memory")
    return view[offset:]


def _entry(addresses: list[EmuAddress], index: int, what: str) -> npt.NDArray[np.uint8]:
    if not 0 <= index < len(addresses):
        raise DlaError(NvError.BadValue, f"EMU {what}: address index {index} is not in the task's address "
                                         f"list ({len(addresses)} entries)")
    return _window(addresses[index], what)


def _read(window: npt.NDArray[np.uint8], offset: int, size: int, what: str) -> bytes:
    if offset + size > window.size:
        raise DlaError(NvError.InvalidSize, f"EMU {what}: {size} bytes at offset {offset} run past the "
                                            f"{window.size} bytes there")
    return window[offset:offset + size].tobytes()


def _buffer(raw: bytes, new_layout: bool) -> BufferDesc:
    if new_layout:
        return BufferDesc(*_BUFFER_2019.unpack_from(raw))
    index, size, fmt, w, h, c, line, surf = _BUFFER_2018.unpack_from(raw)
    return BufferDesc(index, 0, size, fmt, w, h, c, line, surf)


def _cube_offsets(buf: BufferDesc, x: int, bpe: int) -> npt.NDArray[np.int64]:
    """Byte offsets of every element (c, h, w), as the emulator's getAddrOffset computes them."""
    c = np.arange(buf.channel, dtype=np.int64)[:, None, None]
    y = np.arange(buf.height, dtype=np.int64)[None, :, None]
    w = np.arange(buf.width, dtype=np.int64)[None, None, :]
    offsets = (c // x) * buf.surf_stride + y * buf.line_stride + w * (x * bpe) + (c % x) * bpe
    return np.broadcast_to(offsets, (buf.channel, buf.height, buf.width)).reshape(-1)


def _elements(addresses: list[EmuAddress], buf: BufferDesc, x: int | None, bpe: int, what: str,
              count: int | None = None) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The window of the buffer and the byte index of each element's first byte: the cube's elements
    with its strides (``x`` channels per atom), or ``count`` consecutive elements (x None). Checked
    against the memory before any array is made, so no descriptor makes work beyond its memory."""
    window = _entry(addresses, buf.address_index, what)
    if buf.address_index_offset > window.size:
        raise DlaError(NvError.InvalidSize, f"EMU {what}: address_index_offset {buf.address_index_offset} is "
                                            f"past the {window.size} bytes of address index "
                                            f"{buf.address_index}")
    window = window[buf.address_index_offset:]
    if x is None:
        n = buf.channel if count is None else count
        end = n * bpe
    else:
        n = buf.channel * buf.height * buf.width
        last_c = buf.channel - 1  # the channel part is largest at the last channel or one surface before
        channel_part = max(c // x * buf.surf_stride + c % x * bpe
                           for c in (last_c, last_c // x * x - 1) if c >= 0) if n else 0
        end = channel_part + (buf.height - 1) * buf.line_stride + (buf.width - 1) * x * bpe + bpe if n else 0
    if n * bpe > window.size or end > window.size:
        raise DlaError(NvError.InvalidSize, f"EMU {what}: the {buf.width}x{buf.height}x{buf.channel} cube "
                                            f"(strides {buf.line_stride}, {buf.surf_stride}) needs "
                                            f"{max(end, n * bpe)} bytes, the memory has {window.size}")
    offsets = np.arange(n, dtype=np.int64) * bpe if x is None else _cube_offsets(buf, x, bpe)
    return window, offsets


def _load_fp16(window: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    h = window[offsets].astype(np.uint16) | (window[offsets + 1].astype(np.uint16) << 8)
    return half_bits_to_float(h)


def _store_fp16(window: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
                values: npt.NDArray[np.float32]) -> None:
    h = float_to_half_bits(values)
    window[offsets] = (h & 0xFF).astype(np.uint8)
    window[offsets + 1] = (h >> 8).astype(np.uint8)


def _saturate_int8(y: npt.NDArray[np.float32]) -> npt.NDArray[np.int8]:
    """saturate<float, int8>: clamp to [-128, 127], then C's conversion (toward zero); NaN (undefined
    in C++) gives 0."""
    clamped = np.clip(np.nan_to_num(y, nan=0.0), -128.0, 127.0)
    return np.trunc(clamped).astype(np.int8)


def _format(buf: BufferDesc, new_layout: bool, what: str) -> tuple[int, int, bool]:
    """(channels per atom x, bytes per element, fp16) of a buffer's format."""
    if not new_layout:
        if buf.format != FORMAT_2018_FP16:
            raise DlaError(NvError.NotSupported, f"EMU {what}: format {buf.format}: the 2018 emulator "
                                                 f"interface computes FP16 only (format {FORMAT_2018_FP16})")
        return 16, 2, True
    if buf.format == FORMAT_FF16:
        return 16, 2, True
    if buf.format in (FORMAT_INT8, FORMAT_INT8_8):
        return (32 if buf.format == FORMAT_INT8 else 8), 1, False
    raise DlaError(NvError.NotSupported, f"EMU {what}: format {buf.format} is not one the emulator computes "
                                         f"(INT8 {FORMAT_INT8}, INT8_8 {FORMAT_INT8_8}, FF16 {FORMAT_FF16})")


def _f32(value: float | npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return np.asarray(value, dtype=np.float64).astype(np.float32)


def _power(addresses: list[EmuAddress], op: bytes, src: BufferDesc, dst: BufferDesc, new_layout: bool,
           what: str) -> None:
    if new_layout:
        in_scale, out_scale, power, scale, shift = struct.unpack_from("<4x2f3f", op)
    else:
        in_scale = out_scale = 1.0
        power, scale, shift = struct.unpack_from("<x3f", op)
    x_src, bpe, fp16 = _format(src, new_layout, f"{what} POWER src")
    x_dst, _, _ = _format(dst, new_layout, f"{what} POWER dst")
    if src.format != dst.format:
        raise DlaError(NvError.NotSupported, f"EMU {what}: POWER with src format {src.format} and dst format "
                                             f"{dst.format}: the emulator needs them equal")
    # The loops run over the source's cube; the destination is addressed with its own strides.
    shape_dst = BufferDesc(dst.address_index, dst.address_index_offset, dst.size, dst.format, src.width,
                           src.height, src.channel, dst.line_stride, dst.surf_stride)
    sw, so = _elements(addresses, src, x_src, bpe, f"{what} POWER src")
    dw, do = _elements(addresses, shape_dst, x_dst, bpe, f"{what} POWER dst")
    x = _load_fp16(sw, so) if fp16 else sw[so].view(np.int8).astype(np.float32) * np.float32(in_scale)
    base = np.float32(shift) + np.float32(scale) * x  # float32 multiply, then add, as the C++ does
    with np.errstate(all="ignore"):
        y = _f32(np.power(base.astype(np.float64), np.float64(np.float32(power))))
        if fp16:
            _store_fp16(dw, do, y)
        else:
            dw[do] = _saturate_int8(y / np.float32(out_scale)).view(np.uint8)


def softmax_fp32(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The emulator's softmax of a vector in float32: max, sum of ``expf(x - max)`` in order, divide."""
    x = np.asarray(x, dtype=np.float32)
    if x.size == 0:
        return x
    with np.errstate(all="ignore"):
        e = _f32(np.exp((x - np.float32(x.max())).astype(np.float64)))
        total = np.add.accumulate(e, dtype=np.float32)[-1]
        out: npt.NDArray[np.float32] = (e / total).astype(np.float32)
        return out


def _softmax(addresses: list[EmuAddress], src: BufferDesc, dst: BufferDesc, new_layout: bool,
             in_scale: float, out_scale: float, what: str) -> None:
    _, bpe, fp16 = _format(src, new_layout, f"{what} SOFTMAX src")
    _format(dst, new_layout, f"{what} SOFTMAX dst")
    if src.format != dst.format:
        raise DlaError(NvError.NotSupported, f"EMU {what}: SOFTMAX with src format {src.format} and "
                                             f"dst format "
                                             f"{dst.format}: the emulator needs them equal")
    # The emulator reads and writes ``channel`` consecutive elements, whatever the strides say.
    sw, so = _elements(addresses, src, None, bpe, f"{what} SOFTMAX src")
    count = dst.channel if not fp16 else src.channel
    dw, do = _elements(addresses, dst, None, bpe, f"{what} SOFTMAX dst", count)
    if fp16:
        _store_fp16(dw, do, softmax_fp32(_load_fp16(sw, so)))
        return
    # INT8: each input scaled into a half, the softmax stored in halves, then rescaled to int8.
    scaled = half_bits_to_float(float_to_half_bits(sw[so].view(np.int8).astype(np.float32)
                                                   * np.float32(in_scale)))
    halves = half_bits_to_float(float_to_half_bits(softmax_fp32(scaled)))
    if count > halves.size:
        raise DlaError(NvError.BadValue, f"EMU {what}: SOFTMAX dst channel {count} > src channel "
                                         f"{halves.size}")
    with np.errstate(all="ignore"):
        dw[do] = _saturate_int8(halves[:count] / np.float32(out_scale)).view(np.uint8)


def _is_2019_layout(ops_bytes: int, count: int, buffers: npt.NDArray[np.uint8]) -> bool:
    """Which emulator interface a task's descriptors follow (see the module docstring)."""
    if count and buffers.size >= 12:
        fmt_2018 = int(buffers[6]) | int(buffers[7]) << 8
        fmt_2019 = int(buffers[10]) | int(buffers[11]) << 8
        valid_2018 = fmt_2018 == FORMAT_2018_FP16
        valid_2019 = fmt_2019 in (FORMAT_INT8, FORMAT_INT8_8, FORMAT_FF16)
        if valid_2018 != valid_2019:
            return valid_2019
    return ops_bytes >= CONTAINER_2019 * count


def run_emu_task(addresses: list[EmuAddress], what: str = "task") -> None:
    """Run one EMU1 task whose address list is ``addresses`` (entry 0: the network descriptor)."""
    net = _read(_entry(addresses, 0, f"{what} network descriptor"), 0, NETWORK_DESC_SIZE,
                f"{what} network descriptor")
    op_index, buffer_index, count = struct.unpack("<hhH", net)
    ops = _entry(addresses, op_index, f"{what} operation list")
    buffers = _entry(addresses, buffer_index, f"{what} operation buffer list")
    new_layout = _is_2019_layout(ops.size, count, buffers)
    size = CONTAINER_2019 if new_layout else CONTAINER_2018
    for i in range(count):
        op = _read(ops, i * size, size, f"{what} operation {i}")
        raw = _read(buffers, i * BUFFER_CONTAINER_SIZE, BUFFER_CONTAINER_SIZE, f"{what} operation "
                                                                               f"{i} buffers")
        src, dst = _buffer(raw[:BUFFER_DESC_SIZE], new_layout), _buffer(raw[BUFFER_DESC_SIZE:], new_layout)
        if op[0] == OP_POWER:
            _power(addresses, op, src, dst, new_layout, f"{what} operation {i}")
        elif op[0] == OP_SOFTMAX:
            in_scale, out_scale = struct.unpack_from("<4x2f", op) if new_layout else (1.0, 1.0)
            _softmax(addresses, src, dst, new_layout, in_scale, out_scale, f"{what} operation {i}")
        else:
            raise DlaError(NvError.NotSupported, f"EMU {what}: operation {i}: op_type {op[0]} is not POWER "
                                                 f"{OP_POWER} or SOFTMAX {OP_SOFTMAX}")
