"""What a compute unit computes: the model interface, the built-in models, and loading a driver
developer's own model.

The device wraps a model in the AXI4-Lite control block of XRT's kernel execution models
(:mod:`pydla.hw.cu.unit`): the model never sees ap_start or ap_done, only its work.

- A **memory-mapped** model (``memory_mapped = True``; AP_CTRL_HS or AP_CTRL_CHAIN) does one
  execution in :meth:`ComputeUnitModel.execute`, from the argument registers the host wrote before
  ap_start (latched when the start was accepted) and device memory reached through the IOMMU in the
  context the host wrote to the unit's ``ctx`` register.
- A **stream** model (``memory_mapped = False``; AP_CTRL_NONE) turns bytes of its input stream into
  bytes of its output stream in :meth:`ComputeUnitModel.process`, with scalar parameters in its
  argument registers (written with register writes only, as xclRegWrite does).

A configuration names a built-in model (``noop``, ``vadd``, ``scale_i16``) or its own class as
``"model": "python:package.module:ClassName"``; every other key of the IP_LAYOUT entry reaches the
model's constructor as ``params``.

Usage::

    class Double(ComputeUnitModel):
        def execute(self, args, memory):
            src = memory.array(args.u64(0), args.u32(4), np.float32)
            memory.array(args.u64(2), args.u32(4), np.float32)[:] = 2 * src
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.hw.memory import Iommu, MmuFault

if TYPE_CHECKING:
    from pydla.hw.cu.layout import ComputeUnitInfo

ARGS_OFFSET = 0x10  # the first argument register
ARGS_END = 0xF00  # the device's own registers (ctx, error, ...) follow


class CuArgs:
    """A unit's argument registers: word ``i`` is the register at ``0x10 + 4 * i``."""

    def __init__(self, words: bytes) -> None:
        self._words = words

    def __len__(self) -> int:
        return len(self._words) // 4

    def u32(self, i: int) -> int:
        if not 0 <= i < (ARGS_END - ARGS_OFFSET) // 4:
            raise DlaError(NvError.BadParameter,
                           f"argument word {i}: outside 0..{(ARGS_END - ARGS_OFFSET) // 4 - 1}")
        if 4 * i + 4 > len(self._words):
            return 0  # never written since reset
        value: int = struct.unpack_from("<I", self._words, 4 * i)[0]
        return value

    def i32(self, i: int) -> int:
        v = self.u32(i)
        return v - (1 << 32) if v >> 31 else v

    def u64(self, i: int) -> int:
        """A 64-bit value (a device address) in words ``i`` (low half) and ``i + 1`` (high half)."""
        return self.u32(i) | self.u32(i + 1) << 32

    def f32(self, i: int) -> float:
        value: float = struct.unpack("<f", struct.pack("<I", self.u32(i)))[0]
        return value


class CuMemory:
    """Device memory as a unit sees it: in one IOMMU context, every access translated and
    bounds-checked (an access outside the context's mappings raises :class:`MmuFault`, which the
    device turns into the unit's ``error`` register, never into a host exception)."""

    def __init__(self, iommu: Iommu, ctx: int) -> None:
        self.iommu = iommu
        self.ctx = ctx

    def array(self, address: int, count: int, dtype: Any) -> npt.NDArray[Any]:
        """``count`` elements of ``dtype`` at device address ``address``, as a writable numpy view."""
        if count <= 0:
            raise MmuFault(self.ctx, address, 0, f"element count {count} must be > 0")
        itemsize = np.dtype(dtype).itemsize
        return self.iommu.view(self.ctx, address, (count,), (itemsize,), dtype)

    def read(self, address: int, size: int) -> bytes:
        return self.array(address, size, np.uint8).tobytes()

    def write(self, address: int, data: bytes) -> None:
        self.array(address, len(data), np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)


class ComputeUnitModel:
    """The interface of a compute unit's model (subclass it; the device calls it, never the host).

    Class attributes a model sets:
    ``memory_mapped``: True for AP_CTRL_HS / AP_CTRL_CHAIN models (:meth:`execute`), False for
    AP_CTRL_NONE stream models (:meth:`process`). Stream models also say ``granule``: the bytes of
    one input element (:meth:`process` is given a whole number of them).

    ``pipeline_depth`` and ``latency_cycles`` come from the IP_LAYOUT entry (the device applies
    them: an execution completes ``latency_cycles`` after its start at the configured clock; a CHAIN
    unit takes a new start every ``latency_cycles / pipeline_depth`` cycles, up to
    ``pipeline_depth`` in flight); the model receives them in ``info`` to read if it cares.
    """

    memory_mapped: bool = True
    granule: int = 1
    # The arguments a start takes, by name, in order (a memory buffer or a 32-bit word each), as
    # XRT's kernel metadata lists them: the host refuses a start with another number of them. None:
    # not declared (any number is written to the argument registers).
    arguments: tuple[str, ...] | None = None

    def __init__(self, info: ComputeUnitInfo, params: Mapping[str, Any]) -> None:
        self.info = info
        self.params = dict(params)

    def reset_args(self) -> dict[int, int]:
        """Argument words (index -> value) after a reset; e.g. a stream model's default scale."""
        return {}

    def execute(self, args: CuArgs, memory: CuMemory) -> None:
        """One execution (HS / CHAIN). Raise :class:`MmuFault` (through ``memory``) or
        :class:`CuError` to fail it; the execution still completes (ap_done) with the unit's
        ``error`` register set."""
        raise CuError(3, f"model {type(self).__name__} has no execute()")

    def output_bytes(self, input_bytes: int) -> int:
        """Stream models: the output bytes ``input_bytes`` of input become."""
        return input_bytes

    def process(self, data: bytes, args: CuArgs) -> bytes:
        """Stream models (NONE): input bytes (a whole number of ``granule``) -> output bytes
        (``output_bytes(len(data))`` of them)."""
        raise CuError(3, f"model {type(self).__name__} has no process()")


class CuError(Exception):
    """An execution failed with ``code`` (a dla_hw_error_e value) and a message."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class NoOp(ComputeUnitModel):
    """Does nothing; takes its latency (what the execution models' tests and benchmarks drive)."""

    def execute(self, args: CuArgs, memory: CuMemory) -> None:
        return None


class VectorAdd(ComputeUnitModel):
    """out = a + b on float32 arrays. Arguments: a (words 0-1), b (2-3), out (4-5): device
    addresses; n (word 6): the element count."""

    arguments = ("a", "b", "out", "n")

    def execute(self, args: CuArgs, memory: CuMemory) -> None:
        n = args.u32(6)
        if n == 0:
            return
        a = memory.array(args.u64(0), n, np.float32)
        b = memory.array(args.u64(2), n, np.float32)
        out = memory.array(args.u64(4), n, np.float32)
        np.add(a, b, out=out)


class ScaleInt16(ComputeUnitModel):
    """A stream of int16 samples: y = saturate(round(x * scale + offset)). Scalar arguments
    (float32 bits): scale (word 0, 1.0 after reset), offset (word 1, 0.0)."""

    memory_mapped = False
    granule = 2

    def reset_args(self) -> dict[int, int]:
        return {0: struct.unpack("<I", struct.pack("<f", 1.0))[0], 1: 0}

    def process(self, data: bytes, args: CuArgs) -> bytes:
        x = np.frombuffer(data, dtype="<i2").astype(np.float64)
        with np.errstate(all="ignore"):
            y = np.rint(x * args.f32(0) + args.f32(1))
        y = np.nan_to_num(y, nan=0.0)
        return np.clip(y, -32768, 32767).astype("<i2").tobytes()


BUILTIN: dict[str, type[ComputeUnitModel]] = {"noop": NoOp, "vadd": VectorAdd, "scale_i16": ScaleInt16}


def model_class(info: ComputeUnitInfo, where: str) -> type[ComputeUnitModel]:
    """The class an entry's ``model`` names: a built-in, or ``python:package.module:ClassName``."""
    name = info.model
    if name == "shave_tile":  # a SHAVE tile as an HS unit (its own module: it knows the tiles)
        from pydla.hw.cu.shave_tile import ShaveTileUnit

        return ShaveTileUnit
    if not name.startswith("python:"):
        cls = BUILTIN.get(name)
        if cls is None:
            raise DlaError(NvError.BadValue,
                           f"{where}: 'model' = {name!r}: not a built-in model ({', '.join(BUILTIN)}, "
                           "shave_tile, engine) nor 'python:package.module:ClassName'")
        return cls
    module_name, _, class_name = name[len("python:"):].partition(":")
    if not module_name or not class_name:
        raise DlaError(NvError.BadValue,
                       f"{where}: 'model' = {name!r} must be 'python:package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any failure of the user's module is a configuration error
        raise DlaError(NvError.BadValue,
                       f"{where}: 'model' = {name!r}: cannot import {module_name}: "
                       f"{type(e).__name__}: {e}") from e
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, ComputeUnitModel)):
        raise DlaError(NvError.BadValue,
                       f"{where}: 'model' = {name!r}: {module_name} has no class {class_name} derived from "
                       "pydla.hw.cu.ComputeUnitModel")
    return cls


def check_model(info: ComputeUnitInfo, where: str) -> None:
    """The model exists and fits the entry's execution model (NONE: a stream model, no
    memory-mapped arguments; HS / CHAIN: a memory-mapped one)."""
    cls = model_class(info, where)
    stream = info.m_ip_control == "AP_CTRL_NONE"
    if cls.memory_mapped == stream:
        kind = "memory-mapped" if cls.memory_mapped else "stream"
        raise DlaError(NvError.BadValue,
                       f"{where}: 'model' = {info.model!r} is a {kind} model: AP_CTRL_NONE takes stream "
                       "models only (no memory-mapped arguments), AP_CTRL_HS / AP_CTRL_CHAIN "
                       "memory-mapped ones")
    if not isinstance(cls.granule, int) or not 1 <= cls.granule <= 4096:
        raise DlaError(NvError.BadValue,
                       f"{where}: model {info.model!r}: granule {cls.granule!r} must be 1..4096")


def create_model(info: ComputeUnitInfo) -> ComputeUnitModel:
    cls = model_class(info, f"compute unit '{info.name}'")
    try:
        return cls(info, dict(info.params))
    except DlaError:
        raise
    except Exception as e:
        raise DlaError(NvError.BadValue,
                       f"compute unit '{info.name}': model {info.model!r} failed to start: "
                       f"{type(e).__name__}: {e}") from e
