"""Helpers for the virtual-device tests: program a block through its registers, as a driver would.

Nothing here reaches into the device: buffers come from ``dev.memory.allocate``, are mapped with
``dev.iommu.map`` and filled through ``bo.array``; operations are described only by register writes.

Usage::

    dev = VirtualDevice("full")
    arena = Arena(dev)
    src = arena.put(np.ones((2, 3, 4), np.float32))
    dst = arena.cube((2, 2, 3), np.float32)
    program(dev, "PDP", group=0, ctx_id=arena.ctx, src=src, dst=dst, kernel_width=2, ..., op_enable=1)
    out = arena.get(dst)
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.hw.device import VirtualDevice
from pydla.target.config import load_config

FP32 = int(R.dla_precision_e.FP32)
FP16 = int(R.dla_precision_e.FP16)
PRECISION = {np.dtype(np.float32): FP32, np.dtype(np.float16): FP16}
SENTINEL = 0xA5


def f32_bits(value: float) -> int:
    """The IEEE-754 single-precision bits of ``value``, as a register holds them."""
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


def block_index(block: str) -> int:
    return int(dla_block_e[block])


def done_bit(block: str, group: int) -> int:
    return 1 << (2 * block_index(block) + group)


def error_bit(block: str, group: int) -> int:
    return 1 << (16 + 2 * block_index(block) + group)


MMU_FAULT_BIT = 1 << 31


@dataclass(frozen=True)
class Cube:
    """A planar CHW data cube in device memory: its IOVA, shape, byte strides, element type."""

    addr: int
    shape: tuple[int, int, int]
    line_stride: int
    surf_stride: int
    dtype: np.dtype[Any]
    offset: int  # byte offset in its arena's buffer

    @property
    def strides(self) -> tuple[int, int, int]:
        return (self.surf_stride, self.line_stride, self.dtype.itemsize)

    @property
    def extent(self) -> int:
        c, h, w = self.shape
        return (c - 1) * self.surf_stride + (h - 1) * self.line_stride + w * self.dtype.itemsize


def reg(block: str, field: str) -> int:
    """The address of ``<BLOCK>_D_<FIELD>`` (or ``<BLOCK>_S_<FIELD>`` when ``field`` starts with s_)."""
    name = field.upper()
    return R.REGISTERS[f"{block}_{name[0]}_{name[2:]}" if name.startswith("S_") else f"{block}_D_{name}"]


def write_addr(dev: VirtualDevice, block: str, prefix: str, address: int) -> None:
    """A 64-bit address as its _LO and _HI registers."""
    dev.reg_write(R.REGISTERS[f"{block}_D_{prefix.upper()}_LO"], address & 0xFFFFFFFF)
    dev.reg_write(R.REGISTERS[f"{block}_D_{prefix.upper()}_HI"], address >> 32)


def write_cube(dev: VirtualDevice, block: str, name: str, cube: Cube) -> None:
    """The 7 registers of a cube (address lo/hi, width, height, channels, line and surface strides)."""
    c, h, w = cube.shape
    write_addr(dev, block, f"{name}_addr", cube.addr)
    for field, value in (("width", w), ("height", h), ("channels", c), ("line_stride", cube.line_stride),
                         ("surf_stride", cube.surf_stride)):
        dev.reg_write(reg(block, f"{name}_{field}"), value)


def program(dev: VirtualDevice, block: str, *, group: int | None = None, **fields: Any) -> None:
    """Write D registers of ``block`` in keyword order.

    ``group`` first selects the producer group (s_pointer). A :class:`Cube` value writes the cube's 7
    registers, a key ending in ``addr`` an address split lo/hi, a float its IEEE-754 bits, anything
    else (ints, enums) as is. Pass ``op_enable=1`` last to start the operation.
    """
    if group is not None:
        dev.reg_write(reg(block, "s_pointer"), group)
    for key, value in fields.items():
        if isinstance(value, Cube):
            write_cube(dev, block, key, value)
        elif key.endswith("addr"):
            write_addr(dev, block, key, value)
        elif isinstance(value, float):
            dev.reg_write(reg(block, key), f32_bits(value))
        else:
            dev.reg_write(reg(block, key), int(value))


def status(dev: VirtualDevice) -> int:
    return dev.reg_read(R.GLB_INTR_STATUS)


def group_state(dev: VirtualDevice, block: str, group: int) -> int:
    return (dev.reg_read(reg(block, "s_status")) >> (16 * group)) & 3


def consumer(dev: VirtualDevice, block: str) -> int:
    return (dev.reg_read(reg(block, "s_pointer")) >> 16) & 1


class Arena:
    """One buffer object mapped in one context, handed out in aligned pieces."""

    def __init__(self, dev: VirtualDevice, size: int = 1 << 20, ctx: int | None = None) -> None:
        self.dev = dev
        self.bo = dev.memory.allocate(size)
        self.bo.array[:] = SENTINEL
        self.ctx = dev.iommu.create_context() if ctx is None else ctx
        self.iova = dev.iommu.map(self.ctx, self.bo)
        self.size = size
        self._next = 0

    def alloc(self, nbytes: int, align: int = 64) -> int:
        """A byte offset of ``nbytes`` free bytes (its IOVA is ``self.iova + offset``)."""
        offset = -(-self._next // align) * align
        if offset + nbytes > self.size:
            raise MemoryError(f"arena of {self.size} bytes is full")
        self._next = offset + nbytes
        return offset

    def view(self, cube: Cube) -> np.ndarray:
        """The host's numpy view of a cube (writes go to device memory)."""
        view: np.ndarray = np.ndarray(cube.shape, dtype=cube.dtype, buffer=self.bo.array,
                                      offset=cube.offset, strides=cube.strides)
        return view

    def cube(self, shape: tuple[int, int, int], dtype: Any = np.float32, *, line_stride: int | None = None,
             surf_stride: int | None = None) -> Cube:
        """Room for a cube (left filled with the sentinel byte); strides default to packed."""
        dt = np.dtype(dtype)
        c, h, w = shape
        line = w * dt.itemsize if line_stride is None else line_stride
        surf = h * line if surf_stride is None else surf_stride
        extent = (c - 1) * surf + (h - 1) * line + w * dt.itemsize
        offset = self.alloc(extent)
        return Cube(self.iova + offset, (c, h, w), line, surf, dt, offset)

    def put(self, array: np.ndarray, *, line_stride: int | None = None,
            surf_stride: int | None = None) -> Cube:
        """A cube holding ``array`` (C, H, W)."""
        cube = self.cube(array.shape, array.dtype, line_stride=line_stride, surf_stride=surf_stride)
        self.view(cube)[...] = array
        return cube

    def vector(self, values: np.ndarray) -> int:
        """Packed values (a weight tensor, a per-channel vector); returns the IOVA."""
        data = np.ascontiguousarray(values)
        offset = self.alloc(data.nbytes)
        self.bo.array[offset:offset + data.nbytes] = data.view(np.uint8).reshape(-1)
        return self.iova + offset

    def get(self, cube: Cube) -> np.ndarray:
        """A copy of a cube's contents."""
        data: np.ndarray = self.view(cube).copy()
        return data

    def raw(self, cube: Cube) -> np.ndarray:
        """A copy of the bytes the cube spans (gaps included)."""
        data: np.ndarray = self.bo.array[cube.offset:cube.offset + cube.extent].copy()
        return data


class IrqWaiter:
    """Connects to the device's interrupt; :meth:`wait` blocks (with a timeout) until status bits are set."""

    def __init__(self, dev: VirtualDevice) -> None:
        self.dev = dev
        self.event = threading.Event()
        self.calls = 0
        dev.connect_irq(self._handler)

    def _handler(self) -> None:
        self.calls += 1
        self.event.set()

    def wait(self, mask: int, timeout: float = 10.0) -> int:
        """Wait until every bit of ``mask`` is set in GLB_INTR_STATUS; return the status."""
        while True:
            value = status(self.dev)
            if value & mask == mask:
                return value
            if not self.event.wait(timeout):
                raise TimeoutError(f"interrupt status {value:#x}: bits {mask:#x} not set in {timeout} s")
            self.event.clear()


def pdp_op(dev: VirtualDevice, src: Cube, dst: Cube, ctx: int, *, group: int | None = None,
           kernel: tuple[int, int] = (2, 2), stride: tuple[int, int] | None = None,
           pads: tuple[int, int, int, int] = (0, 0, 0, 0), method: int = int(R.pdp_method_e.MAX),
           count_include_pad: int = 0, enable: bool = True) -> None:
    """Program (and by default enable) a pooling operation; pads are (top, left, bottom, right)."""
    stride = kernel if stride is None else stride
    program(dev, "PDP", group=group, ctx_id=ctx, precision=PRECISION[src.dtype], src=src, dst=dst,
            kernel_height=kernel[0], kernel_width=kernel[1], stride_y=stride[0], stride_x=stride[1],
            pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3], method=method,
            count_include_pad=count_include_pad)
    if enable:
        program(dev, "PDP", op_enable=1)


def bdma_op(dev: VirtualDevice, src: int, dst: int, ctx: int, *, line_size: int, group: int | None = None,
            lines: int = 1, src_line_stride: int = 0, dst_line_stride: int = 0, surfaces: int = 1,
            src_surf_stride: int = 0, dst_surf_stride: int = 0, enable: bool = True) -> None:
    """Program (and by default enable) a BDMA copy between two IOVAs."""
    program(dev, "BDMA", group=group, ctx_id=ctx, src_addr=src, dst_addr=dst, line_size=line_size,
            line_repeat=lines, src_line_stride=src_line_stride, dst_line_stride=dst_line_stride,
            surf_repeat=surfaces, src_surf_stride=src_surf_stride, dst_surf_stride=dst_surf_stride)
    if enable:
        program(dev, "BDMA", op_enable=1)


def raw_config(**overrides: Any) -> dict[str, Any]:
    """A configuration as JSON-like data (what ``parse_config`` takes): the full one, with overrides."""
    cfg = load_config("full")
    raw: dict[str, Any] = {
        "name": "test", "description": "a test configuration", "instances": 1, "hw_version": cfg.hw_version,
        "blocks": [b.name for b in cfg.blocks], "precisions": [p.name for p in cfg.precisions],
        "memory_bytes": 1 << 26, "contexts": 4, "iova_base": cfg.iova_base, "iova_size": 1 << 32,
    }
    raw.update(overrides)
    return raw


def pool_input(seed: int, shape: tuple[int, int, int] = (1, 4, 4)) -> np.ndarray:
    x: np.ndarray = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + seed) * np.float32(0.5)
    return x


def max_pool_2x2(x: np.ndarray) -> np.ndarray:
    c, h, w = x.shape
    out: np.ndarray = x.reshape(c, h // 2, 2, w // 2, 2).max(axis=(2, 4))
    return out
