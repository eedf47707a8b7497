"""The virtual device: a register file, functional blocks behind it, device memory, an interrupt.

The host (the KMD, through its portability layer) sees only :meth:`VirtualDevice.reg_write`,
:meth:`VirtualDevice.reg_read`, the memory it maps through the IOMMU, and the interrupt line
(:meth:`VirtualDevice.connect_irq`). The device computes only from what was written there.

Execution modes:

- ``deterministic``: an operation executes inside the register write that makes it runnable (the
  write of ``d_op_enable``), in the order operations were enabled; the interrupt is raised in that
  same call. A KMD test is then reproducible to the register write.
- ``step``: enabling queues the operation; :meth:`VirtualDevice.step` executes one.
- ``threaded``: one thread per block, running beside the host as hardware does, blocks in parallel.

A block runs its two register groups in turn, starting with group 0 (``s_pointer`` consumer bit).
CONV results fly to SDP: a CONV operation runs once the SDP group that is next in turn is enabled in
flying mode, and the pair completes together.

Usage::

    dev = VirtualDevice("full", mode="deterministic")
    dev.connect_irq(lambda: print(hex(dev.reg_read(R.GLB_INTR_STATUS))))
    dev.reg_write(R.BDMA_D_OP_ENABLE, 1)
"""

from __future__ import annotations

import collections
import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.errors import DlaError, NvError
from pydla.hw import blocks
from pydla.hw.config import DeviceConfig, load_config
from pydla.hw.decoded import DecodedCache
from pydla.hw.memory import DeviceMemory, MmuFault

MODES = ("deterministic", "step", "threaded")
WINDOW = 0x1000
S_AREA = 0x40
OP_ENABLE = R.BDMA_D_OP_ENABLE - R.BDMA_S_STATUS  # the same in every block window
# Offsets of the S registers inside a block window (the same in every block).
_S = {name: R.REGISTERS[f"BDMA_S_{name.upper()}"] - R.BDMA_S_STATUS
      for name in ("status", "pointer", "error", "error_group", "ops_done")}
IDLE, ENABLED, RUNNING = (int(R.group_state_e.IDLE), int(R.group_state_e.ENABLED),
                          int(R.group_state_e.RUNNING))
MMU_FAULT_BIT = 31
_ENABLED, _STATUS = 1, 2  # what a register write changed: an operation enabled, interrupt status
DEVICE_RESET_BIT = 31
RESET_QUIESCE_S = 30.0  # the longest a reset waits for an abandoned operation to stop computing

_S_STATUS, _S_POINTER, _S_ERROR, _S_ERROR_GROUP, _S_OPS_DONE = (
    _S["status"], _S["pointer"], _S["error"], _S["error_group"], _S["ops_done"])
_REG_TYPES = {b: getattr(R, f"{b.name.lower()}_regs_t") for b in dla_block_e}
_NAMES = {addr: name for name, addr in R.REGISTERS.items()}
SDP_SRC_MODE = R.SDP_D_SRC_MODE - R.SDP_S_STATUS


def done_bit(block: int, group: int) -> int:
    return 1 << (2 * block + group)


def error_bit(block: int, group: int) -> int:
    return 1 << (16 + 2 * block + group)


@dataclass(frozen=True)
class RegAccess:
    """One entry of the register trace: R or W, the register's name, the value, the D group."""

    op: str
    address: int
    name: str
    value: int
    group: int | None

    def __str__(self) -> str:
        g = f"[g{self.group}]" if self.group is not None else ""
        return f"{self.op} {self.name}{g} = {self.value:#x}"


class _Block:
    def __init__(self, kind: dla_block_e, lock: threading.RLock) -> None:
        self.kind = kind
        # Its worker thread waits here (threaded mode): an enable wakes only the block it concerns,
        # not every block's thread.
        self.wake = threading.Condition(lock)
        self.index = int(kind)
        self.regs_type = _REG_TYPES[kind]
        self.groups = [bytearray(WINDOW), bytearray(WINDOW)]
        # The same bytes as 32-bit registers, in the host's order as the ctypes snapshot reads them;
        # and as numpy arrays, for a program written in one store (reg_write_words).
        self.words = [memoryview(g).cast("I") for g in self.groups]
        self.word_arrays = [np.frombuffer(g, dtype=np.uint32) for g in self.groups]
        self.regs_size = ctypes.sizeof(self.regs_type)  # the bytes a decoded group is keyed by
        self.reset()
        self.ops_done = 0
        self.hangs = 0
        self.injected_errors: collections.deque[int] = collections.deque()
        self.epoch = 0

    def reset(self) -> None:
        self.state = [IDLE, IDLE]
        self.producer = 0
        self.consumer = 0
        self.error = 0
        self.error_group = 0

    def reg(self, group: int, offset: int) -> int:
        value: int = self.words[group][offset >> 2]
        return value

    def snapshot(self, group: int) -> Any:
        return self.regs_type.from_buffer_copy(self.groups[group])


@dataclass
class _Work:
    block: _Block
    group: int
    partner: tuple[_Block, int] | None
    epoch: int
    hang: bool
    injected: int
    partner_epoch: int = 0
    thread: threading.Thread | None = None  # the one computing it


class VirtualDevice:
    """One device instance. See the module docstring."""

    def __init__(self, config: DeviceConfig | str | Path = "full", *, instance: int = 0,
                 mode: str = "deterministic", memory: DeviceMemory | None = None) -> None:
        self.config = load_config(config)
        if mode not in MODES:
            raise DlaError(NvError.BadParameter, f"device mode '{mode}': choose one of {', '.join(MODES)}")
        if not 0 <= instance < self.config.instances:
            raise DlaError(NvError.BadParameter,
                           f"device instance {instance}: config '{self.config.name}' has "
                           f"{self.config.instances}")
        self.instance = instance
        self.mode = mode
        self.memory = memory or DeviceMemory(self.config)
        self.iommu = self.memory.iommu
        # _locate's memo: address -> (block or None for the global window, offset), or None if invalid
        self._where: dict[int, tuple[_Block | None, int] | None] = {}
        # reg_write_words' memo: an address array's bytes -> (block, word indices) when every address
        # is a configuration register of that block's D group, once each; else None
        self._word_targets: dict[bytes, tuple[_Block, npt.NDArray[np.intp]] | None] = {}
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # an operation finished (reset waits on it)
        self._quiescing = 0  # resets waiting on _cond: an operation's end notifies only then
        self._blocks: dict[int, _Block] = {int(b): _Block(b, self._lock) for b in self.config.blocks}
        self._pending: collections.deque[tuple[_Block, int]] = collections.deque()
        self._running: list[_Work] = []  # operations computing now (hung ones excluded)
        self._irq_handlers: list[Callable[[], object]] = []
        self._kicking = False
        self._closed = False
        self.intr_mask = 0
        self.intr_status = 0
        self.fault = (0, 0, 0)  # address, context, block
        self.ops_done = 0
        self.bus_errors = 0
        self.log: collections.deque[str] = collections.deque(maxlen=256)
        self.trace: list[RegAccess] | None = None
        self._precisions = tuple(int(p) for p in self.config.precisions)
        self.decoded = DecodedCache(self.iommu, self._precisions)
        self._threads: list[threading.Thread] = []
        if mode == "threaded":
            for block in self._blocks.values():
                t = threading.Thread(target=self._worker, args=(block,), daemon=True,
                                     name=f"pydla-dev{instance}-{block.kind.name}")
                t.start()
                self._threads.append(t)

    # -- the host side --------------------------------------------------------------------------

    def connect_irq(self, handler: Callable[[], object]) -> None:
        """Call ``handler`` (with no lock of the device held) whenever an unmasked status bit is set."""
        with self._lock:
            self._irq_handlers.append(handler)

    def disconnect_irq(self, handler: Callable[[], object]) -> None:
        with self._lock:
            self._irq_handlers.remove(handler)

    def record_trace(self, on: bool = True) -> list[RegAccess]:
        """Start (or stop) recording every register access; returns the list being filled."""
        with self._lock:
            self.trace = [] if on else None
            return self.trace if self.trace is not None else []

    def reg_read(self, address: int) -> int:
        with self._lock:
            value, group = self._read(address)
            if self.trace is not None:
                self.trace.append(RegAccess("R", address, _NAMES.get(address, f"{address:#x}"), value, group))
            return value

    def reg_write(self, address: int, value: int) -> None:
        value &= 0xFFFFFFFF
        with self._lock:
            group, effect = self._write(address, value)
            if self.trace is not None:
                self.trace.append(RegAccess("W", address, _NAMES.get(address, f"{address:#x}"), value, group))
            kick = effect == _ENABLED and self.mode == "deterministic" and not self._kicking
            if kick:
                self._kicking = True  # this thread runs what is runnable, others' enables included
        if kick:
            self._run_runnable()
        elif effect == _STATUS:
            self._raise_irq()

    def reg_write_many(self, writes: Sequence[tuple[int, int]]) -> None:
        """``reg_write`` of each ``(address, value)`` in order, taking the lock once per run of writes
        with no side effect (an enable or an interrupt change is acted on right after its write)."""
        i, n = 0, len(writes)
        where_of = self._where.get
        while i < n:
            kick = status = False
            with self._lock:
                while i < n:
                    address, value = writes[i]
                    i += 1
                    value &= 0xFFFFFFFF
                    # Most writes are a configuration register of a block's D group (a program is
                    # some 40 of them): stored here directly, without the general path's calls.
                    where = where_of(address)
                    if where is not None and self.trace is None:
                        block, offset = where
                        if block is not None and offset >= S_AREA and offset != OP_ENABLE:
                            block.words[block.producer][offset >> 2] = value
                            continue
                    group, effect = self._write(address, value)
                    if self.trace is not None:
                        self.trace.append(RegAccess("W", address, _NAMES.get(address, f"{address:#x}"), value,
                                                    group))
                    if effect == _ENABLED and self.mode == "deterministic" and not self._kicking:
                        self._kicking = kick = True
                        break
                    if effect == _STATUS:
                        status = True
                        break
            if kick:
                self._run_runnable()
            elif status:
                self._raise_irq()

    def reg_write_words(self, addresses: npt.NDArray[np.uint32], values: npt.NDArray[np.uint32]) -> None:
        """``reg_write`` of ``values[i]`` to ``addresses[i]``, in order. When every address is a
        configuration register of one block's D group (an operation's program) and no trace is
        recorded, the values are stored in one numpy assignment under one lock; otherwise the writes
        go one by one, with their effects."""
        key = addresses.tobytes()
        if key in self._word_targets:
            target = self._word_targets[key]
        else:
            target = self._word_target(addresses.tolist())
            if len(self._word_targets) >= 1 << 12:  # the programs of the loaded tasks; bounded
                self._word_targets.clear()
            self._word_targets[key] = target
        if target is not None and len(values) == len(target[1]):
            block, index = target
            with self._lock:
                if self.trace is None:
                    block.word_arrays[block.producer][index] = values
                    return
        self.reg_write_many(list(zip(addresses.tolist(), values.tolist(), strict=True)))

    def _word_target(self, addresses: list[int]) -> tuple[_Block, npt.NDArray[np.intp]] | None:
        where = [self._locate(a) for a in addresses]
        if not where or len(set(addresses)) != len(addresses):
            return None
        block = where[0][0] if where[0] is not None else None
        if block is None or any(w is None or w[0] is not block or w[1] < S_AREA or w[1] == OP_ENABLE
                                for w in where):
            return None
        return block, np.array([w[1] >> 2 for w in where if w is not None], dtype=np.intp)

    def step(self) -> bool:
        """In step mode, execute the next runnable operation; False when there is none."""
        if self.mode != "step":
            raise DlaError(NvError.InvalidState, f"step() needs mode 'step', not '{self.mode}'")
        with self._lock:
            work = self._take_runnable(None)
        if work is None:
            return False
        with np.errstate(all="ignore"):  # see _execute
            self._execute(work)
        return True

    def inject_hang(self, block: dla_block_e | str, count: int = 1) -> None:
        """The next ``count`` operations of ``block`` start and never finish (until a reset)."""
        with self._lock:
            self._block(block).hangs += count

    def inject_error(self, block: dla_block_e | str, code: int = int(R.dla_hw_error_e.BAD_CONFIG)) -> None:
        """The next operation of ``block`` fails with ``code`` (a dla_hw_error_e)."""
        if code not in R.dla_hw_error_e._value2member_map_ or code == R.dla_hw_error_e.NONE:
            raise DlaError(NvError.BadParameter,
                           f"inject_error code {code}: use a dla_hw_error_e other than NONE")
        with self._lock:
            self._block(block).injected_errors.append(code)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            for block in self._blocks.values():
                block.wake.notify()
        for t in self._threads:
            t.join(timeout=5)

    def idle(self) -> bool:
        """No group of any block is enabled or running."""
        with self._lock:
            return all(s == IDLE for b in self._blocks.values() for s in b.state)

    # -- registers ----------------------------------------------------------------------------------

    def _block(self, which: dla_block_e | str | int) -> _Block:
        kind = dla_block_e[which.upper()] if isinstance(which, str) else dla_block_e(which)
        block = self._blocks.get(int(kind))
        if block is None:
            raise DlaError(NvError.NotSupported,
                           f"device config '{self.config.name}' has no {kind.name} block")
        return block

    def _locate(self, address: int) -> tuple[_Block | None, int] | None:
        if address in self._where:
            return self._where[address]
        if address % 4 or not 0 <= address < WINDOW * 7:
            where = None
        else:
            window, offset = divmod(address, WINDOW)
            block = self._blocks.get(window - 1) if window else None
            where = (block, offset) if window == 0 or block is not None else None
        if len(self._where) < 1 << 16:  # the register window is finite; a bad address stream is not
            self._where[address] = where
        return where

    def _read(self, address: int) -> tuple[int, int | None]:
        try:
            where = self._where[address]  # the memo, without a call
        except KeyError:
            where = self._locate(address)
        if where is None:
            self.bus_errors += 1
            return 0, None
        block, offset = where
        if block is None:
            return self._read_glb(address), None
        if offset < S_AREA:
            if offset == _S_POINTER:
                return block.producer | (block.consumer << 16), None
            if offset == _S_STATUS:
                return block.state[0] | (block.state[1] << 16), None
            if offset == _S_ERROR:
                return block.error, None
            if offset == _S_ERROR_GROUP:
                return block.error_group, None
            if offset == _S_OPS_DONE:
                return block.ops_done & 0xFFFFFFFF, None
            return 0, None
        return block.words[block.producer][offset >> 2], block.producer

    def _read_glb(self, address: int) -> int:
        if address == R.GLB_INTR_STATUS:  # read by every interrupt handler: first
            return self.intr_status
        if address == R.GLB_OPS_DONE:  # read at every job start
            return self.ops_done & 0xFFFFFFFF
        fault_addr, fault_ctx, fault_block = self.fault
        return {
            R.GLB_HW_VERSION: self.config.hw_version,
            R.GLB_CONFIG: self.config.block_mask,
            R.GLB_INTR_MASK: self.intr_mask,
            R.GLB_MMU_FAULT_ADDR_LO: fault_addr & 0xFFFFFFFF,
            R.GLB_MMU_FAULT_ADDR_HI: fault_addr >> 32,
            R.GLB_MMU_FAULT_CTX: fault_ctx,
            R.GLB_MMU_FAULT_BLOCK: fault_block,
            R.GLB_OPS_DONE: self.ops_done & 0xFFFFFFFF,
        }.get(address, 0)

    def _write(self, address: int, value: int) -> tuple[int | None, int]:
        """Under the lock: apply a write; return the D group written and what it changed."""
        try:
            where = self._where[address]  # the memo, without a call
        except KeyError:
            where = self._locate(address)
        if where is None:
            self.bus_errors += 1
            return None, 0
        block, offset = where
        if block is None:
            return None, self._write_glb(address, value)
        if offset < S_AREA:
            if offset == _S["pointer"]:
                block.producer = value & 1
            return None, 0
        group = block.producer
        block.words[group][offset >> 2] = value
        if offset == OP_ENABLE:
            if value & 1 and block.state[group] == IDLE:
                block.state[group] = ENABLED
                self._pending.append((block, group))
                if self._threads:
                    self._wake(block)
                return group, _ENABLED
            if not value & 1 and block.state[group] == ENABLED:
                block.state[group] = IDLE
                if (block, group) in self._pending:
                    self._pending.remove((block, group))
        return group, 0

    def _write_glb(self, address: int, value: int) -> int:
        if address == R.GLB_INTR_MASK:
            self.intr_mask = value
            return _STATUS  # unmasking may expose pending status
        if address == R.GLB_INTR_SET:
            self.intr_status |= value
            return _STATUS
        if address == R.GLB_INTR_STATUS:
            self.intr_status &= ~value
        elif address == R.GLB_RESET:
            self._reset(value)
        return 0

    def _reset(self, bits: int) -> None:
        targets = list(self._blocks.values()) if bits >> DEVICE_RESET_BIT & 1 else [
            b for b in self._blocks.values() if bits >> b.index & 1]
        for block in targets:
            block.epoch += 1
            block.reset()
            block.hangs = 0
            block.injected_errors.clear()
            self.intr_status &= ~(done_bit(block.index, 0) | done_bit(block.index, 1)
                                  | error_bit(block.index, 0) | error_bit(block.index, 1))
        self._pending = collections.deque((b, g) for b, g in self._pending if b not in targets)
        if bits >> DEVICE_RESET_BIT & 1:
            self.intr_status = 0
            self.fault = (0, 0, 0)
        self.decoded.clear()  # a decode is a function of registers and mappings; a reset starts over
        self.log.append(f"reset of {', '.join(b.kind.name for b in targets) or 'nothing'}")
        self._cond.notify_all()
        for block in self._blocks.values():
            block.wake.notify()
        # As a hardware reset quiesces the block's DMA, the reset returns only once an operation the
        # blocks were computing has stopped writing memory (a numpy kernel cannot be interrupted
        # midway; its result is then discarded as abandoned). Not from the computing thread itself.
        deadline = time.monotonic() + RESET_QUIESCE_S
        while any(self._abandoned(w, targets) for w in self._running):
            if any(w.thread is threading.current_thread() for w in self._running):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                self.log.append("reset: an abandoned operation is still computing")
                break
            self._quiescing += 1
            try:
                self._cond.wait(left)
            finally:
                self._quiescing -= 1

    @staticmethod
    def _abandoned(work: _Work, targets: list[_Block]) -> bool:
        if work.block in targets and work.block.epoch != work.epoch:
            return True
        return work.partner is not None and work.partner[0] in targets \
            and work.partner[0].epoch != work.partner_epoch

    # -- execution ----------------------------------------------------------------------------------

    def _runnable(self, block: _Block, group: int) -> tuple[_Block, int] | bool | None:
        """False if (block, group) cannot run now; else its flying partner (or None)."""
        if block.state[group] != ENABLED or block.consumer != group:
            return False
        if block.kind == dla_block_e.SDP and block.reg(group, SDP_SRC_MODE) == R.sdp_src_mode_e.FLYING:
            return False  # runs with its CONV operation
        if block.kind == dla_block_e.CONV:
            sdp = self._blocks.get(int(dla_block_e.SDP))
            if sdp is None:
                return False
            g = sdp.consumer
            if sdp.state[g] != ENABLED or sdp.reg(g, SDP_SRC_MODE) != R.sdp_src_mode_e.FLYING:
                return False
            return sdp, g
        return None

    def _take_runnable(self, only: _Block | None) -> _Work | None:
        """Under the lock: the first enabled operation that can run, marked RUNNING."""
        for i, (block, group) in enumerate(self._pending):
            if only is not None and block is not only:
                continue
            partner = self._runnable(block, group)
            if partner is False:
                continue
            del self._pending[i]
            block.state[group] = RUNNING
            involved = [block]
            if isinstance(partner, tuple):
                partner[0].state[partner[1]] = RUNNING
                self._pending.remove(partner)  # the flying SDP runs as part of this operation
                involved.append(partner[0])
            hang = False
            for b in involved:
                if b.hangs > 0:
                    b.hangs -= 1
                    hang = True
            injected = 0
            for b in involved:
                if b.injected_errors and not hang and not injected:
                    injected = b.injected_errors.popleft()
            pair = partner if isinstance(partner, tuple) else None
            work = _Work(block, group, pair, block.epoch, hang, injected,
                         pair[0].epoch if pair is not None else 0, threading.current_thread())
            if not hang:
                self._running.append(work)
            return work
        return None

    def _run_runnable(self) -> None:
        """Deterministic mode: execute everything that is runnable, in enable order. The caller
        set ``_kicking``; it is cleared under the lock only once nothing is runnable, so an
        operation enabled meanwhile by another thread is never left behind."""
        try:
            with np.errstate(all="ignore"):  # see _execute; set once for the whole run
                while True:
                    with self._lock:
                        work = self._take_runnable(None)
                        if work is None:
                            self._kicking = False
                            return
                    self._execute(work)
        except BaseException:
            with self._lock:
                self._kicking = False
            raise

    def _worker(self, block: _Block) -> None:
        with np.errstate(all="ignore"):  # see _execute; this thread's setting, for its lifetime
            self._work_loop(block)

    def _work_loop(self, block: _Block) -> None:
        while True:
            with self._cond:
                work = None
                while not self._closed:
                    work = self._take_runnable(block)
                    if work is not None:
                        break
                    block.wake.wait()
                if self._closed:
                    return
            assert work is not None
            self._execute(work)

    def _execute(self, work: _Work) -> None:
        if work.hang:
            self.log.append(f"{work.block.kind.name} group {work.group}: hangs (injected)")
            return
        error, detail, fault = 0, "", None
        try:
            if work.injected:
                raise blocks.HwError(work.injected, "injected error")
            # The callers run this under np.errstate(all="ignore"): IEEE arithmetic, NaN and inf
            # flow on and no numpy warning reaches the host (set once per run, not per operation).
            self.decoded.get(work.block, work.group, work.partner)()
        except MmuFault as e:
            error, detail, fault = int(R.dla_hw_error_e.MMU_FAULT), str(e), e
        except blocks.HwError as e:
            error, detail = int(e.code), e.detail
        except Exception as e:  # a device never throws into the host: any bug becomes an error
            error, detail = int(R.dla_hw_error_e.BAD_CONFIG), f"internal error: {type(e).__name__}: {e}"
        with self._lock:
            self._complete(work, error, detail, fault)
            if self._quiescing:
                self._cond.notify_all()
            if self._threads:
                self._wake(work.block)  # its other group may be next
                if work.partner is not None:
                    self._wake(work.partner[0])
        self._raise_irq()

    def _complete(self, work: _Work, error: int, detail: str, fault: MmuFault | None) -> None:
        """Under the lock: mark the operation (and its flying partner) done or failed."""
        self._running = [w for w in self._running if w is not work]
        parts = [(work.block, work.group, work.epoch)]
        if work.partner:
            parts.append((work.partner[0], work.partner[1], work.partner_epoch))
        if work.block.epoch != work.epoch and work.partner and work.partner[0].epoch == work.partner_epoch:
            # CONV was reset under its pair: the SDP half lost its input.
            error, detail, fault = int(R.dla_hw_error_e.NO_PRODUCER), "CONV reset during the pair", None
        for block, group, epoch in parts:
            if block.epoch != epoch:
                continue  # this block was reset while the operation ran: its part is abandoned
            block.state[group] = IDLE
            block.consumer = group ^ 1
            if error:
                block.error, block.error_group = error, group
                self.intr_status |= error_bit(block.index, group)
            else:
                block.ops_done += 1
                self.ops_done += 1
                self.intr_status |= done_bit(block.index, group)
        if error:
            known = R.dla_hw_error_e._value2member_map_.get(error)
            name = known.name if known is not None else str(error)
            self.log.append(f"{work.block.kind.name} group {work.group}: {name}: {detail}")
            if fault is not None:
                block_index = fault.block if fault.block is not None else work.block.index
                self.fault = (fault.address, fault.ctx, block_index)
                self.intr_status |= 1 << MMU_FAULT_BIT

    # -- interrupts ---------------------------------------------------------------------------------

    def _wake(self, block: _Block) -> None:
        """Under the lock: wake the worker of ``block``, and CONV's when SDP changed (a flying SDP
        operation is what lets a CONV operation start)."""
        block.wake.notify()
        if block.kind == dla_block_e.SDP:
            conv = self._blocks.get(int(dla_block_e.CONV))
            if conv is not None:
                conv.wake.notify()

    def _irq_pending(self) -> bool:
        return bool(self.intr_status & ~self.intr_mask & 0xFFFFFFFF)

    def _raise_irq(self) -> None:
        with self._lock:
            if not self._irq_pending():
                return
            handlers = list(self._irq_handlers)
        for handler in handlers:
            handler()
