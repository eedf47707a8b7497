"""The data types of the NVDLA portability layer (:mod:`pydla.portability.interface`): engine
selection, heaps, memory handles, device information, fences, tasks and their status. Import them
from :mod:`pydla.portability.interface`, which re-exports them with the port class.

Usage::

    from pydla.portability.interface import NvDlaFence, NvDlaTask
    task = NvDlaTask([(mem, 0)], post_fences=[NvDlaFence(sem, 1)])
"""

from __future__ import annotations

import abc
import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.deviceapi.generated.dla_regs import dla_precision_e
from pydla.errors import DlaError, NvError


class NvDlaEngineSelect(enum.IntEnum):
    """Which device instance NvDlaOpen opens (implementation defined: instance numbers)."""

    DLA0 = 0
    DLA1 = 1
    DLA2 = 2
    DLA3 = 3


class NvDlaHeap(enum.IntEnum):
    """Where NvDlaGetMem allocates. This implementation has device memory only."""

    DRAM = 0
    SRAM = 1


class NvDlaMemHandle(abc.ABC):
    """A buffer from NvDlaGetMem: its bytes as numpy, read/write, size and device address."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Bytes in the buffer."""

    @property
    @abc.abstractmethod
    def device_address(self) -> int:
        """Where the device sees it (for diagnostics; descriptors use address-list indices)."""

    @abc.abstractmethod
    def bytes_view(self) -> npt.NDArray[np.uint8]:
        """The buffer's bytes as a writable numpy array (the host's mapping)."""

    def array(self, dtype: Any = np.uint8, shape: tuple[int, ...] | None = None,
              offset: int = 0) -> npt.NDArray[Any]:
        """A numpy view of the buffer as ``dtype`` of ``shape`` from byte ``offset``."""
        dt = np.dtype(dtype)
        raw = self.bytes_view()
        count = (raw.size - offset) // dt.itemsize if shape is None else int(math.prod(shape))
        if offset < 0 or count < 0 or offset + count * dt.itemsize > raw.size:
            what = (f"{tuple(shape)} {dt} = {count * dt.itemsize} bytes" if shape is not None
                    else f"{dt} from offset {offset}")
            at = f" at offset {offset}" if offset and shape is not None else ""
            raise DlaError(NvError.InvalidSize, f"array: {what}{at} does not fit the {raw.size}-byte buffer")
        view: npt.NDArray[Any] = raw[offset:offset + count * dt.itemsize].view(dt)
        return view if shape is None else view.reshape(shape)


@dataclass(frozen=True)
class NvDlaDeviceInfo:
    """What :meth:`NvDlaPort.NvDlaGetDeviceInfo` reports of a device instance: which it is (of how
    many), its configuration's name, version register, functional blocks, precisions and memory,
    and the names ("kernel:instance") of its compute units (its IP_LAYOUT; empty when a port or an
    older daemon does not say).

    Usage: ``port.NvDlaGetDeviceInfo(0).has_block("PDP")``
    """

    instance: int
    instances: int
    name: str
    hw_version: int
    blocks: tuple[dla_block_e, ...]
    precisions: tuple[dla_precision_e, ...]
    memory_bytes: int
    compute_units: tuple[str, ...] = ()
    # Per unit of ``compute_units``, the names of the arguments a start takes (the model's
    # declaration, XRT's kernel metadata); None, or a tuple shorter than ``compute_units``: not known.
    compute_unit_arguments: tuple[tuple[str, ...] | None, ...] = ()
    # The unit of ``compute_units`` that is the DLA engine itself (its tasks go through NvDlaSubmit,
    # not NvDlaSubmitCu); None: the device declares none, or the port does not say.
    engine_unit: str | None = None

    def has_compute_unit(self, name: str) -> bool:
        """Whether a compute unit answers to ``name``: its instance, its kernel or "kernel:instance"."""
        return self._unit_index(name) is not None

    def compute_unit(self, name: str) -> str | None:
        """The "kernel:instance" name of the unit answering to ``name`` (see has_compute_unit)."""
        i = self._unit_index(name)
        return None if i is None else self.compute_units[i]

    def compute_unit_args(self, name: str) -> tuple[str, ...] | None:
        """The arguments a start of the unit called ``name`` takes, when the port says (else None)."""
        i = self._unit_index(name)
        return None if i is None or i >= len(self.compute_unit_arguments) else self.compute_unit_arguments[i]

    def _unit_index(self, name: str) -> int | None:
        return next((i for i, cu in enumerate(self.compute_units) if name in (cu, *cu.split(":", 1))), None)

    def has_block(self, block: dla_block_e | str) -> bool:
        """Whether the device has ``block`` (a dla_block_e or its name, in any case)."""
        if isinstance(block, str):
            return block.upper() in (b.name for b in self.blocks)
        return block in self.blocks

    def has_precision(self, precision: dla_precision_e | str) -> bool:
        """Whether the device computes in ``precision`` (a dla_precision_e or its name)."""
        if isinstance(precision, str):
            return precision.upper() in (p.name for p in self.precisions)
        return precision in self.precisions


@dataclass(frozen=True)
class NvDlaTrace:
    """What :meth:`NvDlaPort.NvDlaTraceStart` returns: the port's own ``handle`` of the trace, and the
    device's number of the context the starting handle runs in (its operations' ``context_id`` in
    the trace's events; -1 when the port does not say)."""

    handle: Any
    context_id: int = -1


@dataclass(frozen=True)
class NvDlaFence:
    """A sync point: ``semaphore`` (from :meth:`NvDlaPort.NvDlaCreateSemaphore`) reaching ``value``."""

    semaphore: Any
    value: int


@dataclass
class NvDlaTask:
    """One task to submit: its address list (entry 0 is the network descriptor) and the fences it
    waits for and signals. An entry is ``(mem, offset)`` (from ``offset`` to the end of ``mem``) or
    ``(mem, offset, size)`` (a sub-buffer: the task may use only those bytes). ``scalars``: the
    task's scalar arguments as ``(argidx, value)`` integer pairs, which the driver puts in the
    argument registers of the DLA engine's compute unit (XRT's scalar kernel arguments, such as the
    DPU opcode of XRT's run recipe); a device that declares no engine unit refuses them.
    ``nvdla_interface``: for a task of an NVDLA Loadable on an NVDLA configuration, the firmware
    interface version (major, minor, sub) of its network-descriptor blob (it chooses the descriptor
    layouts); None for pydla's own tasks."""

    address_list: list[tuple[NvDlaMemHandle, int] | tuple[NvDlaMemHandle, int, int]]
    pre_fences: list[NvDlaFence] = field(default_factory=list)
    post_fences: list[NvDlaFence] = field(default_factory=list)
    priority: int = 0
    timeout_ms: int | None = None
    scalars: list[tuple[int, int]] = field(default_factory=list)
    nvdla_interface: tuple[int, int, int] | None = None


@dataclass
class NvDlaPreparedTask:
    """What :meth:`NvDlaPort.NvDlaPrepareTask` returns: ``task`` (its address list, checked once)
    and the port's own handle to the prepared form (None for ports without one)."""

    task: NvDlaTask
    handle: Any = None


@dataclass(frozen=True)
class NvDlaTaskStatus:
    """What NvDlaSubmit reports per task: its id, for diagnostics and NvDlaTaskWait."""

    task_id: int
    handle: Any


NvDlaCuArg = int | tuple[NvDlaMemHandle, int] | tuple[NvDlaMemHandle, int, int]
"""One argument of :meth:`NvDlaPort.NvDlaSubmitCu`: a 32-bit word, or a buffer as in NvDlaTask."""
