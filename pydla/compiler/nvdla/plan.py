"""The NVDLA program the INT8 back end makes: buffers of INT8 feature cubes and the hardware
operations over them (CONV with its SDP on the fly, SDP from memory, PDP), with every integer
parameter the registers get. :mod:`pydla.compiler.nvdla.emit` writes it as an NVDLA Loadable and
:mod:`pydla.compiler.nvdla.reference` computes it in plain integers (numpy).

Usage::

    plan = Plan()
    plan.add_buffer(Buffer("x", (16, 8, 8), role="input", scale=0.02, zero_point=0))
    plan.ops.append(ConvOp(Ref("x"), weights, sdp=SdpOp(None, Ref("y"), ...)))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Int8Array = npt.NDArray[np.int8]


@dataclass
class Buffer:
    """An INT8 feature cube (C, H, W) of the network: ``real = scale * (q - zero_point)``."""

    name: str
    shape: tuple[int, int, int]
    role: str = "scratch"  # "input", "output" or "scratch"
    scale: float = 1.0
    zero_point: int = 0
    bind_id: int = 0


@dataclass(frozen=True)
class Ref:
    """Channels [c0, c0 + channels) of a buffer (all of them when channels is None); c0 is a multiple
    of the atom's channels."""

    buffer: str
    c0: int = 0
    channels: int | None = None


@dataclass(frozen=True)
class Alu:
    """An X stage's ALU: ``algo`` "sum", "max" or "min" with an operand: per layer (an int), per
    kernel (int8 per channel) or per element (a Ref of the same size), shifted left by ``shift``."""

    algo: str
    operand: int | Int8Array | Ref
    shift: int = 0


@dataclass(frozen=True)
class Stage:
    """An X stage (X1 or X2): ALU, then MUL (an int: per layer, 16 bits; an array: per kernel, int8),
    then the rounding right shift ``truncate``, then ReLU. Per-kernel ALU and MUL operands are read
    together (NVDLA's BOTH), so a stage's memory operands are all per kernel or all per element."""

    alu: Alu | None = None
    mul: int | Int8Array | None = None
    truncate: int = 0
    relu: bool = False


@dataclass(frozen=True)
class Cvt:
    """The SDP's output converter: ``sat8(round((x - offset) * scale / 2**shift))``."""

    offset: int = 0
    scale: int = 1
    shift: int = 0


@dataclass
class SdpOp:
    """An SDP operation: input from memory (``src``) or from its CONV on the fly (None)."""

    src: Ref | None
    dst: Ref
    x1: Stage | None = None
    x2: Stage | None = None
    cvt: Cvt = field(default_factory=Cvt)
    name: str = ""


@dataclass
class ConvOp:
    """A direct convolution (INT8 x INT8 -> 32-bit sums) handing its output to ``sdp``."""

    src: Ref
    weights: Int8Array  # K x C x R x S
    sdp: SdpOp
    stride: tuple[int, int] = (1, 1)  # x, y
    dilation: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # left, right, top, bottom
    pad_value: int = 0  # int8: the input's zero point
    name: str = ""


@dataclass
class PdpOp:
    """Pooling (PDP): "max" or "avg" over ``kernel`` (w, h) windows; an average's padded positions count
    ``pad_value`` each."""

    src: Ref
    dst: Ref
    mode: str
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    pad_value: int = 0
    name: str = ""


@dataclass
class SoftmaxOp:
    """A softmax over the channels of a (C, 1, 1) INT8 cube, as NVIDIA's runtime emulator computes it
    (an EMU1 task after the DLA task): ``q * in_scale`` to half, softmax in float32, to half, divided
    by ``out_scale`` and truncated to int8."""

    src: Ref
    dst: Ref
    in_scale: float
    out_scale: float
    name: str = ""


Op = ConvOp | SdpOp | PdpOp | SoftmaxOp


@dataclass
class Plan:
    """Buffers by name (inputs and outputs in bind order) and the operations in execution order."""

    buffers: dict[str, Buffer] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def add_buffer(self, b: Buffer) -> Buffer:
        self.buffers[b.name] = b
        return b

    def shape(self, ref: Ref) -> tuple[int, int, int]:
        c, h, w = self.buffers[ref.buffer].shape
        return (c - ref.c0 if ref.channels is None else ref.channels), h, w

    def role(self, role: str) -> list[Buffer]:
        return sorted((b for b in self.buffers.values() if b.role == role), key=lambda b: b.bind_id)
