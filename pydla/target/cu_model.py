"""The compute-unit models a configuration's IP_LAYOUT names, as far as a configuration is checked:
the interface a model implements (:class:`ComputeUnitModel`, its argument registers :class:`CuArgs`,
its error :class:`CuError`), the built-in models' kinds, and :func:`check_model`.

A configuration names a built-in model (``noop``, ``vadd``, ``scale_i16``, ``shave_tile``) or a
driver developer's own class as ``"model": "python:package.module:ClassName"``. The device
(:mod:`pydla.hw.cu.models`) has the built-in models' code and builds each unit's model; what is
checked when a configuration loads is here, so that reading a configuration (the compiler, the
loadable tools, the KMD) needs nothing of the device: the model exists (a built-in, or a class
derived from :class:`ComputeUnitModel` that its module defines) and fits the entry's execution
model.

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
from typing import Any, Protocol

import numpy.typing as npt

from pydla.errors import DlaError, NvError
from pydla.target.cu_info import ComputeUnitInfo

ARGS_OFFSET = 0x10  # the first argument register
ARGS_END = 0xF00  # the device's own registers (ctx, error, ...) follow
# The built-in models (pydla.hw.cu.models has their code): name -> (memory_mapped, granule).
BUILTIN_MODELS: dict[str, tuple[bool, int]] = {"noop": (True, 1), "vadd": (True, 1), "scale_i16": (False, 2),
                                               "shave_tile": (True, 1)}


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


class UnitMemory(Protocol):
    """Device memory as a unit sees it, in the IOMMU context ``ctx`` (the device's
    :class:`pydla.hw.cu.models.CuMemory`): every access translated and bounds-checked."""

    ctx: int

    def array(self, address: int, count: int, dtype: Any) -> npt.NDArray[Any]:
        """``count`` elements of ``dtype`` at device address ``address``, as a writable numpy view."""
        ...

    def read(self, address: int, size: int) -> bytes: ...

    def write(self, address: int, data: bytes) -> None: ...


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

    def execute(self, args: CuArgs, memory: UnitMemory) -> None:
        """One execution (HS / CHAIN). Raise the device's memory fault (through ``memory``) or
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


def unknown_model(name: str, where: str) -> DlaError:
    """The error for a ``model`` that is neither a built-in nor ``python:...``."""
    return DlaError(NvError.BadValue,
                    f"{where}: 'model' = {name!r}: not a built-in model ({', '.join(BUILTIN_MODELS)}, "
                    "engine) nor 'python:package.module:ClassName'")


def user_model_class(name: str, where: str) -> type[ComputeUnitModel]:
    """The class ``python:package.module:ClassName`` names (its module imported), derived from
    :class:`ComputeUnitModel`; DlaError BadValue naming ``where`` otherwise."""
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
    name = info.model
    if name.startswith("python:"):
        cls = user_model_class(name, where)
        memory_mapped, granule = cls.memory_mapped, cls.granule
    elif name in BUILTIN_MODELS:
        memory_mapped, granule = BUILTIN_MODELS[name]
    else:
        raise unknown_model(name, where)
    stream = info.m_ip_control == "AP_CTRL_NONE"
    if memory_mapped == stream:
        kind = "memory-mapped" if memory_mapped else "stream"
        raise DlaError(NvError.BadValue,
                       f"{where}: 'model' = {info.model!r} is a {kind} model: AP_CTRL_NONE takes stream "
                       "models only (no memory-mapped arguments), AP_CTRL_HS / AP_CTRL_CHAIN "
                       "memory-mapped ones")
    if not isinstance(granule, int) or not 1 <= granule <= 4096:
        raise DlaError(NvError.BadValue,
                       f"{where}: model {info.model!r}: granule {granule!r} must be 1..4096")
