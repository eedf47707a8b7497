"""The virtual device of an NVDLA hardware configuration (``nv_full``, ``nv_small``, ``nv_large``, ...):
NVDLA's register map, NVIDIA's C model's arithmetic, device memory behind an IOMMU, one interrupt.

The host (the KMD through its port) sees what it sees of :class:`pydla.hw.device.VirtualDevice`:
:meth:`NvdlaDevice.reg_read` / :meth:`NvdlaDevice.reg_write` at NVDLA's register byte addresses (the
configuration's map, ``nvdla_v1_regs`` or ``nvdla_v2_regs``: ``NVDLA_PDP_D_OP_ENABLE_0``...), the SMMU's
registers past them (``nvdla_smmu``: ``PYDLA_SMMU_CTX`` selects the IOMMU context of the operations
launched next), the memory it maps through the IOMMU, and the interrupt line
(:meth:`NvdlaDevice.connect_irq`), up while GLB's line (an unmasked ``S_INTR_STATUS`` bit) or the SMMU's
(an unmasked fault) is.

It is made of parts: NVDLA's register file (:mod:`pydla.hw.nvdla.regfile`: groups, pointers,
interrupts, bus errors), the SMMU (:mod:`pydla.hw.nvdla.smmu`), the engine computing each launched
operation with the block kernels (:mod:`pydla.hw.nvdla.engine`). Modes as VirtualDevice's:
``deterministic`` (an operation runs inside the register write that launches it), ``step``
(:meth:`NvdlaDevice.step` runs one), ``threaded`` (a worker thread runs them beside the host).

Nothing raises into the host: an access to no register, or a value that is not 32 bits, is a counted
bus error (``bus_errors``, ``faults``); an operation whose registers a block refuses, or whose DMA leaves
its context's mappings, ends without its done interrupt and is counted (``ops_failed``, ``errors``;
memory faults also in the SMMU's registers and ``fault``).

Usage::

    dev = NvdlaDevice("nv_small")
    dev.reg_write(S.PYDLA_SMMU_CTX, ctx)
    dev.reg_write(V2.NVDLA_PDP_D_OP_ENABLE_0, 1)      # after the PDP's other registers
    dev.reg_read(V2.NVDLA_GLB_S_INTR_STATUS_0)        # PDP_DONE_STATUS0 (bit 4)
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import nvdla_smmu as S
from pydla.errors import DlaError, NvError
from pydla.hw.memory import DeviceMemory
from pydla.hw.nvdla.engine import UNIT, Done, NvdlaEngine
from pydla.hw.nvdla.memory import ByteMemory
from pydla.hw.nvdla.regfile import NvdlaRegisterFile
from pydla.hw.nvdla.regfile_config import regfile_config
from pydla.hw.nvdla.regfile_units import Fault, Launch
from pydla.hw.nvdla.smmu import Smmu
from pydla.hw.nvdla.target import NvdlaTarget, by_name
from pydla.target.config import DeviceConfig, load_config

if TYPE_CHECKING:
    from pydla.hw.mcu.nvdla import NvdlaMicrocontroller

MODES = ("deterministic", "step", "threaded")
WORD = 0xFFFFFFFF
MAX_ERRORS = 64
_PAST_NVDLA = min(S.PYDLA_SMMU_CTX, S.PYDLA_CTL_RESET)  # the SMMU's and the reset register, past NVDLA's map


def nvdla_target(config: DeviceConfig) -> NvdlaTarget:
    """The block kernels' facts of ``config``'s NVDLA hardware, which must be what the configuration
    states (a DlaError naming the first field that differs)."""
    nv = config.nvdla
    if nv is None:
        raise DlaError(NvError.BadParameter, f"device config '{config.name}' is not an NVDLA configuration "
                                             "(it has no 'nvdla' section)")
    t = by_name(nv.hw)
    stated = {"register_map": (nv.register_map, t.register_map), "atom_bytes": (nv.atom_bytes, t.atom),
              "precisions": (set(nv.precisions), {p.name for p in t.precisions}),
              "mac_atomic_c": (nv.mac_atomic_c, t.mac_atomic_c),
              "mac_atomic_k": (nv.mac_atomic_k, t.mac_atomic_k),
              "cbuf_banks": (nv.cbuf_banks, t.cbuf_banks),
              "cbuf_bank_width * cbuf_bank_depth": (nv.cbuf_bank_width * nv.cbuf_bank_depth,
                                                    t.cbuf_bank_entries * t.cbuf_entry_bytes),
              "sdp_y": (nv.sdp_y, t.sdp_has_y), "sdp_lut": (nv.sdp_lut, t.sdp_has_lut),
              "weight_compression": (nv.weight_compression, t.weight_compression),
              "winograd": (nv.winograd, t.winograd), "max_batch > 1": (nv.max_batch > 1, t.multi_batch),
              "blocks: BDMA": (config.has_block("BDMA"), t.has_bdma),
              "blocks: RUBIK": (config.has_block("RUBIK"), t.has_rubik)}
    for key, (have, want) in stated.items():
        if have != want:
            raise DlaError(NvError.BadValue, f"device config '{config.name}': nvdla {key} = {have!r}, but "
                                             f"NVDLA's {nv.hw} has {want!r}")
    return t


class NvdlaDevice:
    """One device instance of an NVDLA configuration. See the module docstring."""

    def __init__(self, config: DeviceConfig | str | Path = "nv_full", *, instance: int = 0,
                 mode: str = "deterministic", memory: DeviceMemory | None = None) -> None:
        self.config = load_config(config)
        self.target = nvdla_target(self.config)
        nv = self.config.nvdla
        assert nv is not None  # nvdla_target refused a configuration without it
        if mode not in MODES:
            raise DlaError(NvError.BadParameter, f"device mode '{mode}': choose one of {', '.join(MODES)}")
        if not 0 <= instance < self.config.instances:
            raise DlaError(NvError.BadParameter, f"device instance {instance}: config '{self.config.name}' "
                                                 f"has {self.config.instances}")
        self.instance, self.mode = instance, mode
        self.memory = memory or DeviceMemory(self.config)
        self.iommu = self.memory.iommu
        self.sram = ByteMemory(nv.sram_bytes) if nv.sram_bytes else None
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._engine_lock = threading.Lock()  # threaded and step: the engine runs outside the device lock
        self._irq_handlers: list[Callable[[], object]] = []
        self._kick = False
        self._closed = False
        self._epoch = 0  # a reset abandons what was launched before it
        self._queue: collections.deque[tuple[Launch, int, int]] = collections.deque()
        self._nvdla_lists: dict[bytes, bool] = {}  # reg_write_words: address lists without SMMU registers
        self.smmu = Smmu(on_line=self._line)
        self.regs = NvdlaRegisterFile(regfile_config(nv.hw), on_launch=self._launched, on_irq=self._line)
        self.engine = NvdlaEngine(self.target, self.iommu, self.sram)
        self.ops_done = self.ops_failed = self.smmu_bus_errors = 0
        self.errors: collections.deque[str] = collections.deque(maxlen=MAX_ERRORS)
        self.fault = (0, 0, 0)  # the last memory fault: address, context, unit (DLA_OP_*)
        self._hangs: collections.Counter[str] = collections.Counter()  # injected: the next n never end
        self._injected: collections.Counter[str] = collections.Counter()  # injected: the next n fail
        self._worker: threading.Thread | None = None
        self.mcu: NvdlaMicrocontroller | None = None
        if self.config.headed:  # the microcontroller running the engine scheduler (pydla.hw.mcu.nvdla)
            from pydla.hw.mcu.nvdla import NvdlaMicrocontroller  # here: the firmware imports the KMD's parts

            self.mcu = NvdlaMicrocontroller(self)
        if mode == "threaded":
            self._worker = threading.Thread(target=_work, args=(self,), daemon=True,
                                            name=f"pydla-nvdla{instance}")
            self._worker.start()

    # -- the host's access --------------------------------------------------------------------------

    def reg_read(self, address: int) -> int:
        """The register at byte ``address`` (0 and a counted bus error for no register)."""
        with self._lock:
            if Smmu.owns(address):
                return self.smmu.read(address)
            if _is_reset(address):
                return 0  # write only
            return self.regs.read(address)

    def reg_write(self, address: int, value: int) -> None:
        """Write the 32-bit ``value`` to the register at byte ``address`` (a bus error for anything else)."""
        if _is_reset(address):
            self._reset_write(value)
            return
        with self._lock:
            self._write(address, value)
        self._raise_irq()

    def reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        for address, value in writes:
            if _is_reset(address):
                self._reset_write(value)
            else:
                with self._lock:
                    self._write(address, value)
        self._raise_irq()

    def _reset_write(self, value: int) -> None:
        """``PYDLA_CTL_RESET``: outside the device lock, as the reset waits for a computing operation."""
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= WORD:
            if value & 1:
                self.reset()
            return
        with self._lock:
            self.smmu_bus_errors += 1
            self.regs.faults.append(Fault("bus error", S.PYDLA_CTL_RESET, None,
                                          f"write of {value!r} to PYDLA_CTL_RESET: not a 32-bit value"))

    def reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None:
        """``reg_write`` of ``values[i]`` to ``addresses[i]``, in order: an operation's program in one
        call, each block's plain registers stored at once (the register file's ``write_words``); with
        anything but two uint32 arrays of one length, or an SMMU or reset register among them, one by
        one."""
        if (type(addresses) is np.ndarray and type(values) is np.ndarray and addresses.dtype == np.uint32
                and values.dtype == np.uint32 and addresses.ndim == values.ndim == 1
                and len(addresses) == len(values) and self._nvdla_only(addresses)):
            with self._lock:
                self.regs.write_words(addresses, values)
            self._raise_irq()
            return
        pairs = zip(np.asarray(addresses).tolist(), np.asarray(values).tolist(), strict=False)
        self.reg_write_many(list(pairs))

    def _nvdla_only(self, addresses: npt.NDArray[np.uint32]) -> bool:
        """No SMMU or reset register among ``addresses`` (known per address list, as the plans are)."""
        key = addresses.tobytes()
        known = self._nvdla_lists.get(key)
        if known is None:
            if len(self._nvdla_lists) >= 1 << 12:
                self._nvdla_lists.clear()
            known = self._nvdla_lists[key] = not bool((addresses >= _PAST_NVDLA).any())
        return known

    def _write(self, address: int, value: int) -> None:
        if not Smmu.owns(address):
            self.regs.write(address, value)
        elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= WORD:
            self.smmu.write(address, value)
        else:
            self.smmu_bus_errors += 1
            self.regs.faults.append(Fault("bus error", address, None,
                                          f"write of {value!r} to the SMMU: not a 32-bit value"))

    @property
    def bus_errors(self) -> int:
        """Accesses to no register and values that are not 32 bits, since the device was made."""
        return self.regs.bus_errors + self.smmu_bus_errors

    @property
    def irq(self) -> bool:
        """The interrupt line: GLB's or the SMMU's."""
        return self.regs.irq or self.smmu.line

    def connect_irq(self, handler: Callable[[], object]) -> None:
        """Call ``handler`` (with no lock of the device held) when the line rises or an operation ends
        with it up."""
        with self._lock:
            self._irq_handlers.append(handler)

    def disconnect_irq(self, handler: Callable[[], object]) -> None:
        with self._lock:
            self._irq_handlers.remove(handler)

    def cu_stream_write(self, name: str, data: bytes, timeout_s: float) -> None:
        raise DlaError(NvError.NotSupported, _no_units(self.config, name))

    def cu_stream_read(self, name: str, nbytes: int, timeout_s: float) -> bytes:
        raise DlaError(NvError.NotSupported, _no_units(self.config, name))

    # -- operations -----------------------------------------------------------------------------------

    def _launched(self, launch: Launch) -> None:
        """The register file launched ``launch`` (under the device lock): it runs through the context
        selected now."""
        entry = (launch, self.smmu.ctx, self._epoch)
        processor = launch.processor
        if self._hangs[processor]:  # it never ends: its groups stay enabled until a reset
            self._hangs[processor] -= 1
            self.errors.append(f"{processor} group {launch.group}: hangs (injected)")
            return
        if self._injected[processor]:
            self._injected[processor] -= 1
            self._apply([Done(processor, launch.group, False, error="failed (injected)")], entry[2])
            return
        if self.mode == "deterministic":
            self._apply(self.engine.run(launch, entry[1]), entry[2])
        else:
            self._queue.append(entry)
            self._cond.notify_all()

    def _apply(self, dones: list[Done], epoch: int) -> None:
        """Completions of the engine (under the device lock); dropped when a reset came in between."""
        if epoch != self._epoch:
            return
        for done in dones:
            active = self.regs.active.get(done.processor)
            if active is None or active.group != done.group:  # cannot happen: reported, survived
                self.errors.append(f"{done.processor} group {done.group}: completed but not running")
                continue
            if done.fault is not None:
                f = done.fault
                self.smmu.record(f, UNIT[done.processor])
                self.fault = (f.address, f.ctx, UNIT[done.processor])
            if done.ok:
                self.ops_done += 1
            else:
                self.ops_failed += 1
                self.errors.append(f"{done.processor} group {done.group}: {done.error}")
            try:
                self.regs.complete(done.processor, done.group, done.ok, done.status)
            except DlaError as e:  # a status register the map lacks: a bug, reported and survived
                self.errors.append(f"{done.processor} group {done.group}: {e.message}")
                self.regs.complete(done.processor, done.group, done.ok)
            self._kick = True

    def _line(self, up: bool) -> None:
        if up:
            self._kick = True

    def _raise_irq(self) -> None:
        with self._lock:
            if not self._kick:
                return
            self._kick = False
            if not self.irq:
                return
            handlers = list(self._irq_handlers)
        for handler in handlers:
            handler()

    def step(self) -> bool:
        """``step`` mode: run the oldest launched operation; False when none waits."""
        if self.mode != "step":
            raise DlaError(NvError.InvalidState, f"step() is for mode 'step' (this device: '{self.mode}')")
        return self._run_one(wait=False)

    def _run_one(self, wait: bool) -> bool:
        with self._cond:
            while wait and not self._queue and not self._closed:
                self._cond.wait()
            if self._closed or not self._queue:
                return False
            launch, ctx, epoch = self._queue.popleft()
        with self._engine_lock:  # a reset bumps the epoch holding this lock too: stable in here
            if epoch != self._epoch:  # launched before a reset: abandoned, not run on the new state
                return True
            dones = self.engine.run(launch, ctx)
        with self._cond:
            self._apply(dones, epoch)
            self._cond.notify_all()
        self._raise_irq()
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Until nothing launched waits to run (threaded and step modes); False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue or self._closed, timeout_s)

    # -- fault injection, reset and close --------------------------------------------------------------

    def inject_hang(self, processor: str, count: int = 1) -> None:
        """The next ``count`` operations of ``processor`` (BDMA, CONV, SDP, PDP, CDP, RUBIK) start and
        never end, until a reset: for a driver's timeout and recovery."""
        with self._lock:
            self._hangs[_processor(self.config, processor)] += count

    def inject_error(self, processor: str, count: int = 1) -> None:
        """The next ``count`` operations of ``processor`` end without their done interrupt, as one whose
        registers the block refused."""
        with self._lock:
            self._injected[_processor(self.config, processor)] += count

    def reset(self) -> None:
        """The whole device back to its reset state, as a power-on: every register, the SMMU, the
        operations launched and waiting (their results, if still computing, are discarded)."""
        with self._engine_lock, self._lock:
            self._epoch += 1
            self._queue.clear()
            self.engine.reset()
            self.regs.reset()
            self.smmu.reset()
            self.fault = (0, 0, 0)
            self._hangs.clear()
            self._injected.clear()

    def close(self) -> None:
        if self.mcu is not None:
            self.mcu.close()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join(timeout=5)


def _is_reset(address: object) -> bool:
    return isinstance(address, int) and not isinstance(address, bool) and address == S.PYDLA_CTL_RESET


def _work(device: NvdlaDevice) -> None:
    """The worker thread of a threaded device: runs the launched operations until the device closes."""
    while device._run_one(wait=True):
        pass


def _processor(config: DeviceConfig, name: str) -> str:
    """``name`` when ``config``'s device runs operations of that processor (a DlaError if not)."""
    if name not in UNIT or not config.has_block(name):
        have = ", ".join(b.name for b in config.blocks)
        raise DlaError(NvError.BadParameter, f"device config '{config.name}' has no {name!r} "
                                             f"operations (it has {have})")
    return name


def _no_units(config: DeviceConfig, name: str) -> str:
    return f"device config '{config.name}' has no compute units (asked for '{name}')"
