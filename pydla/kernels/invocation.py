"""One call of a custom kernel, laid out by the argument convention of :mod:`pydla.kernels`: CMX
offsets of its inputs and outputs, its argument buffer (a MemRefData per tensor, then the caller's
parameter bytes) and the RW data (dims and strides) with where it goes in WIN_E. Shared by
:class:`pydla.ShaveKernel` and the ONNX custom operator (:mod:`pydla.compiler.custom_kernel`).

Usage: ``inv = plan_invocation(image, [((4, 4), f32)], [((4, 4), f32)], b"", 2 << 20, "k")``
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.kernels.build import RUNTIME
from pydla.kernels.image import KernelImage
from pydla.kernels.memref import DEFAULT_STACK, MEMREF_TYPES, cmx_place, memref, usable_cmx

DATA_TYPES = MEMREF_TYPES  # the element types a MemRefData describes
CUSTOM_KERNEL_ID = 0x100  # the kernel id error reports name for a custom kernel

Spec = tuple[tuple[int, ...], np.dtype[Any]]


@dataclass(frozen=True)
class Invocation:
    """One call of a custom kernel, laid out: CMX offsets of its inputs and outputs, the argument
    buffer and the RW data (dims and strides) with where it goes in WIN_E."""

    args: bytes
    data: bytes
    data_offset: int
    inputs: tuple[int, ...]  # CMX offsets
    outputs: tuple[int, ...]
    stack: int


def plan_invocation(image: KernelImage, inputs: Sequence[Spec], outputs: Sequence[Spec], params: bytes,
                    cmx_bytes: int, what: str, stack: int = DEFAULT_STACK) -> Invocation:
    """Lay out a call of ``image`` on ``inputs`` and ``outputs`` ((shape, dtype) each) with
    ``params`` after their MemRefData, in a tile of ``cmx_bytes`` CMX with a ``stack``-byte stack;
    DlaError naming ``what`` when a tensor's type is not a MemRefData type or they do not fit.

    Usage: ``inv = plan_invocation(image, [((4, 4), f32)], [((4, 4), f32)], b"", 2 << 20, "k")``
    """
    if not outputs:
        raise DlaError(NvError.BadParameter, f"{what}: a kernel needs at least one output")
    if stack % 16 or not 256 <= stack <= cmx_bytes // 2:
        raise DlaError(NvError.BadParameter, f"{what}: stack of {stack} bytes: a multiple of 16, "
                                             f"256..{cmx_bytes // 2}")
    capacity = usable_cmx(cmx_bytes, stack)
    offsets: list[int] = []
    used = 0
    for k, (shape, dtype) in enumerate([*inputs, *outputs]):
        name = f"input {k}" if k < len(inputs) else f"output {k - len(inputs)}"
        if dtype not in DATA_TYPES:
            raise DlaError(NvError.NotSupported, f"{what}: {name} is {dtype}; a SHAVE kernel takes "
                                                 f"{', '.join(str(t) for t in DATA_TYPES)}")
        if len(shape) > S.MAX_DIMS or 0 in shape:
            raise DlaError(NvError.BadParameter, f"{what}: {name} of shape {tuple(shape)}: a MemRefData "
                                                 f"has 0..{S.MAX_DIMS} dimensions, none of them 0")
        at = cmx_place(used)
        used = at + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offsets.append(at)
    if used > capacity:
        sizes = ", ".join(f"{tuple(s)} {d}" for s, d in [*inputs, *outputs])
        raise DlaError(NvError.InsufficientMemory,
                       f"{what}: the tensors ({sizes}) need {used} bytes of CMX, page-aligned; a tile has "
                       f"{capacity} beside its {stack}-byte stack (cmx_bytes {cmx_bytes}): the whole of "
                       "every tensor must fit, split the work into smaller calls")
    data_offset = -(-image.rw_end // 16) * 16
    data = bytearray()
    memrefs = [memref(shape, dtype, S.WIN_F + at, data, data_offset)
               for (shape, dtype), at in zip([*inputs, *outputs], offsets, strict=True)]
    args = b"".join(bytes(m) for m in memrefs) + bytes(params)
    if len(args) > S.ARGS_MAX_BYTES:
        raise DlaError(NvError.InvalidSize, f"{what}: {len(args)} argument bytes ({len(memrefs)} MemRefData "
                                            f"and {len(params)} parameter bytes), at most {S.ARGS_MAX_BYTES}")
    if data_offset + len(data) > S.WIN_E_BYTES:
        raise DlaError(NvError.InvalidSize, f"{what}: the kernel's RW data ends at WIN_E + {image.rw_end}: "
                                            f"no room for its arguments' dims and strides ({len(data)} "
                                            f"bytes) in the {S.WIN_E_BYTES}-byte WIN_E")
    n = len(inputs)
    return Invocation(args, bytes(data), data_offset, tuple(offsets[:n]), tuple(offsets[n:]), stack)


def params_bytes(params: Any, what: str) -> bytes:
    """The caller's parameter bytes: bytes-like, a ctypes object, or a numpy array (its bytes)."""
    if params is None:
        return b""
    if isinstance(params, (bytes, bytearray, memoryview)):
        return bytes(params)
    if isinstance(params, (ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._SimpleCData)):
        return bytes(memoryview(params).cast("B"))
    if isinstance(params, np.ndarray):
        return np.ascontiguousarray(params).tobytes()
    raise DlaError(NvError.BadParameter, f"{what}: params must be bytes, a ctypes object or a numpy array, "
                                         f"not {type(params).__name__}")


def buffer_name(name: str) -> str:
    """The loadable buffer of kernel ``name``'s ELF (``pydla info`` lists it): ``shave_<name>``."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)[:40] or "kernel"
    return f"shave_{clean}" if clean != RUNTIME else "shave_runtime_custom"  # not pydla's runtime kernel
