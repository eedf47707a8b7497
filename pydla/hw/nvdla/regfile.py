"""NVDLA's register file on the device side: both register maps, every register of every block, the
register groups and their pointers, the interrupts, the configuration ROM, BDMA's queue, the LUT RAM.

The register map is the contract ``nvdla_v1_regs`` (nv_full) or ``nvdla_v2_regs`` (the newer
configurations), chosen by the configuration (:mod:`pydla.hw.nvdla.regfile_config`). Every register
resets to its declared value; a read returns its readable bits (write-only bits read 0); a write
stores its writable bits only; read-only registers ignore writes. What the hardware computes is
computed here: ``S_STATUS`` and ``S_POINTER.CONSUMER`` from the groups, GLB's interrupt status
(set by a done or by ``S_INTR_SET``, cleared by writing 1, the line up while an unmasked bit is),
BDMA's ``STATUS``, CDMA's ``S_CBUF_FLUSH_STATUS`` (always flushed: there is no buffer to flush).

Operations. When every block an operation needs has its consumer group enabled, the register file
calls ``on_launch`` with a :class:`~pydla.hw.nvdla.regfile_units.Launch` (typed copies of those groups'
registers); the device computes and calls :meth:`NvdlaRegisterFile.complete`, which clears the groups'
``OP_EN``, flips their consumers, raises the done interrupts and launches what is enabled next. An
operation is, as NVIDIA's firmware programs them: CONV = CDMA, CSC, CMAC_A, CMAC_B and CACC together;
SDP with SDP_RDMA when its input comes from memory or an enabled stage reads an operand from memory;
PDP with PDP_RDMA when its input comes from memory; CDP with CDP_RDMA always; RUBIK; BDMA's transfers
queued before a ``CFG_LAUNCH0/1``. (Chaining a CONV into the SDP and the SDP into the PDP on the fly is
the device's business: each is launched on its own.)

Bad accesses never raise: an access to no register (unaligned, between registers, past the map, to a
block the configuration lacks) or a value that is not 32 bits is a bus error: a read returns 0 and a
write is dropped, as NVDLA's bus does with an address no block decodes; the register file counts it
(``bus_errors``), keeps the last faults (``faults``) and calls ``on_fault``. So do a write to a group
whose operation is enabled (dropped, as the RTL drops it), a transfer queued on a full BDMA queue, a
launch of a busy BDMA group and a LUT access past its table.

Usage::

    rf = NvdlaRegisterFile("nv_full", on_launch=launches.append)
    rf.write(R.NVDLA_PDP_S_POINTER_0, 1)            # program group 1
    rf.write(R.NVDLA_PDP_D_DATA_CUBE_IN_WIDTH_0, 7)
    rf.write(R.NVDLA_PDP_D_OP_ENABLE_0, 1)          # with PDP_RDMA if the input is in memory
    rf.complete("PDP", launches[-1].group)          # GLB S_INTR_STATUS.PDP_DONE_STATUS1 rises
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping

from pydla.deviceapi.registers import RegisterInfo
from pydla.deviceapi.runtime import Record
from pydla.errors import DlaError, NvError
from pydla.hw.nvdla.regfile_block import U32, Plan, plan_writes, write_planned
from pydla.hw.nvdla.regfile_config import RegfileConfig, regfile_config
from pydla.hw.nvdla.regfile_units import (
    WINDOW,
    BdmaQueue,
    Fault,
    GroupedUnit,
    Launch,
    LutRam,
)

WORD = 0xFFFFFFFF
PROCESSORS: dict[str, tuple[str, ...]] = {  # the blocks of each operation, the reporting block first
    "BDMA": ("BDMA",), "CONV": ("CACC", "CMAC_A", "CMAC_B", "CSC", "CDMA"), "SDP": ("SDP", "SDP_RDMA"),
    "PDP": ("PDP", "PDP_RDMA"), "CDP": ("CDP", "CDP_RDMA"), "RUBIK": ("RBK",)}
DONE_BIT = {"SDP": 0, "CDP": 2, "PDP": 4, "BDMA": 6, "RUBIK": 8}  # GLB interrupt bit of group 0
CDMA_DAT_BIT, CDMA_WT_BIT, CACC_BIT = 16, 18, 20
MAX_FAULTS = 64
MAX_PLANS = 1 << 12  # write_words' plans (one per operation program of the loaded tasks); bounded
_GROUPED = ("CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC", "SDP_RDMA", "SDP", "PDP_RDMA", "PDP", "CDP_RDMA",
            "CDP", "RBK")


class NvdlaRegisterFile:
    """The registers of one NVDLA of configuration ``config`` (a name such as ``"nv_small"``)."""

    def __init__(self, config: str | RegfileConfig, *, on_launch: Callable[[Launch], None] | None = None,
                 on_irq: Callable[[bool], None] | None = None,
                 on_fault: Callable[[Fault], None] | None = None) -> None:
        self.config = regfile_config(config) if isinstance(config, str) else config
        self.regs = self.config.regmap
        self.on_launch, self.on_irq, self.on_fault = on_launch, on_irq, on_fault
        info: dict[str, RegisterInfo] = self.regs.REGISTER_INFO
        self._info = {r.address: r for r in info.values()}
        all_bases = self._block_bases()
        self._map_windows = {base // WINDOW: name for name, base in all_bases.items()}
        self.bases = {name: base for name, base in all_bases.items() if name in self.config.blocks}
        self.units = {name: GroupedUnit(name, self._struct(name), info, base)
                      for name, base in self.bases.items() if name in _GROUPED}
        self._unit_of = {unit.base // WINDOW: unit for unit in self.units.values()}
        # What reading or writing a register of a grouped block does besides storing it.
        self._role = {r.address: r.name[len(f"NVDLA_{u.name}_"):-2] for u in self.units.values()
                      for r in info.values() if u.base <= r.address < u.base + WINDOW
                      and r.name.endswith(_ROLES)}
        self._window = {base // WINDOW: name for name, base in self.bases.items()}
        self.luts: dict[str, LutRam] = {name: LutRam() for name in ("SDP", "CDP") if name in self.units}
        self.bdma = BdmaQueue()
        bdma = self.bases.get("BDMA")
        self._bdma_regs: dict[int, str] = {} if bdma is None else {
            self.regs.REGISTERS[f"NVDLA_BDMA_{n}_0"]: n for n in _BDMA_REGS}
        self._plain: dict[int, int] = {}  # the registers outside the grouped blocks
        self._plans: dict[bytes, tuple[list[int], Plan]] = {}  # write_words: by the addresses' bytes
        # complete's status registers by name: (block, offset, read-only bits)
        self._status_where: dict[str, tuple[GroupedUnit, int, int]] = {}
        self.faults: collections.deque[Fault] = collections.deque(maxlen=MAX_FAULTS)
        self.bus_errors = 0
        self.active: dict[str, Launch] = {}
        self._pending: collections.deque[Launch] = collections.deque()
        self._draining = False
        self.reset()

    # -- the map ----------------------------------------------------------------------------------

    def _block_bases(self) -> dict[str, int]:
        """The base of every block of the map (the longest block name matches: SDP_RDMA before SDP)."""
        bases: dict[str, int] = {}
        by_length = sorted(_ALL_NAMES, key=len, reverse=True)
        for name, address in self.regs.REGISTERS.items():
            block = next(b for b in by_length if name.startswith(f"NVDLA_{b}_"))
            bases[block] = min(bases.get(block, address), address & ~(WINDOW - 1))
        return bases

    def _struct(self, block: str) -> type[Record]:
        top = getattr(self.regs, f"{self.regs.NAME}_t")
        struct: type[Record] = dict((n, t) for n, t in top._fields_)[block.lower()]
        return struct

    def struct_of(self, block: str) -> type[Record]:
        """The typed view (the generated struct) of ``block``'s window: ``nvdla_v1_cdma_t``..."""
        return self._struct(block)

    # -- reset and interrupts ------------------------------------------------------------------------

    def reset(self) -> None:
        """Every register to its reset value; queued and running operations are dropped."""
        for unit in self.units.values():
            unit.reset()
        for name in self.luts:
            self.luts[name] = LutRam()
        self.bdma.reset()
        self._plain = {r.address: r.reset for r in self._info.values()
                       if r.address // WINDOW not in self._unit_of}
        for name, value in self.config.rom.items():
            self._plain[self.regs.REGISTERS[name]] = value
        self.active.clear()
        self._bdma_next: Launch | None = None
        self._pending.clear()
        self._status = 0
        self._mask = self._info[self.regs.NVDLA_GLB_S_INTR_MASK_0].reset
        self._line = False

    @property
    def irq(self) -> bool:
        """The interrupt line: an interrupt status bit is set and not masked."""
        return self._line

    def _set_status(self, status: int) -> None:
        self._status = status & self._intr_bits
        line = bool(self._status & ~self._mask)
        if line != self._line:
            self._line = line
            if self.on_irq is not None:
                self.on_irq(line)

    @property
    def _intr_bits(self) -> int:
        return self._info[self.regs.NVDLA_GLB_S_INTR_STATUS_0].clear_mask

    # -- faults -------------------------------------------------------------------------------------

    def _fault(self, kind: str, address: int | None, value: int | None, message: str) -> None:
        fault = Fault(kind, address, value, message)
        if kind == "bus error":
            self.bus_errors += 1
        self.faults.append(fault)
        if self.on_fault is not None:
            self.on_fault(fault)

    def _where(self, op: str, offset: object, value: object = None) -> RegisterInfo | None:
        """The register at ``offset``; None (a bus error recorded) for anything else."""
        if not isinstance(offset, int) or isinstance(offset, bool):
            self._fault("bus error", None, None, f"{op} at {offset!r}: not an integer offset")
            return None
        reg = self._info.get(offset)
        if reg is None or offset // WINDOW not in self._window:
            why = "no register there" if reg is None else \
                f"{self._map_windows[offset // WINDOW]} is not in {self.config.name}"
            self._fault("bus error", offset if 0 <= offset <= WORD else None,
                        value if isinstance(value, int) else None, f"{op}: {why}")
            return None
        return reg

    # -- the host's access ------------------------------------------------------------------------

    def read(self, offset: int) -> int:
        """The register at byte ``offset`` from the NVDLA base (0 and a bus error for no register)."""
        reg = self._where("read", offset)
        if reg is None:
            return 0
        unit = self._unit_of.get(offset // WINDOW)
        if unit is not None:
            return self._read_unit(unit, offset - unit.base, reg) & reg.read_mask
        r = self.regs
        if offset == r.NVDLA_GLB_S_INTR_STATUS_0:
            return self._status
        if offset == r.NVDLA_GLB_S_INTR_MASK_0:
            return self._mask
        if offset in self._bdma_regs:
            return self._read_bdma(self._bdma_regs[offset]) & reg.read_mask
        return self._plain[offset] & reg.read_mask

    def write(self, offset: int, value: int) -> None:
        """Write ``value`` (32 bits) to the register at byte ``offset`` (a bus error for no register)."""
        reg = self._where("write", offset, value)
        if reg is None:
            return
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= WORD:
            self._fault("bus error", offset, None, f"write of {value!r} to {reg.name}: not a 32-bit value")
            return
        unit = self._unit_of.get(offset // WINDOW)
        if unit is not None:
            self._write_unit(unit, offset - unit.base, reg, value)
        else:
            self._write_plain(offset, reg, value)
        self._drain()

    def write_words(self, addresses: U32, values: U32) -> None:
        """:meth:`write` of ``values[i]`` to ``addresses[i]`` in order (both uint32 arrays of one
        length), the plain D registers of a block stored at once (:mod:`pydla.hw.nvdla.regfile_block`)."""
        key = addresses.tobytes()
        planned = self._plans.get(key)
        if planned is None:
            offsets = addresses.tolist()
            planned = (offsets, plan_writes(self, offsets))
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = planned
        write_planned(self, planned[1], planned[0], values)

    def _write_plain(self, offset: int, reg: RegisterInfo, value: int) -> None:
        r = self.regs
        if offset == r.NVDLA_GLB_S_INTR_STATUS_0:
            self._set_status(self._status & ~(value & reg.clear_mask))
        elif offset == r.NVDLA_GLB_S_INTR_SET_0:
            self._set_status(self._status | (value & reg.write_only_mask))
        elif offset == r.NVDLA_GLB_S_INTR_MASK_0:
            self._mask = value & reg.write_mask
            self._set_status(self._status)
        elif offset in self._bdma_regs and self._bdma_regs[offset] != "STATUS":
            self._write_bdma(offset, self._bdma_regs[offset], value)
        else:
            self._plain[offset] = (self._plain[offset] & ~reg.write_mask) | (value & reg.write_mask)

    # -- grouped blocks ---------------------------------------------------------------------------

    def _read_unit(self, unit: GroupedUnit, at: int, reg: RegisterInfo) -> int:
        role = self._role.get(reg.address)
        if role is None:  # stored: a D register of the producer's group, or a single register
            return unit.load(unit.producer if reg.double else 0, at)
        if role == "S_STATUS":
            return unit.status(0) | (unit.status(1) << 16)
        if role == "S_POINTER":
            return unit.producer | (unit.consumer << 16)
        if role == "S_CBUF_FLUSH_STATUS":
            return 1  # FLUSH_DONE: the model has no convolution buffer to flush
        lut = self.luts[unit.name]
        if role == "S_LUT_ACCESS_CFG":
            return reg.pack(LUT_ADDR=min(lut.entry, 0x3FF), LUT_TABLE_ID=lut.table,
                            LUT_ACCESS_TYPE=lut.write_access)
        value = lut.read() if not lut.write_access else 0  # S_LUT_ACCESS_DATA
        if value is None:
            self._fault("lut range", reg.address, None,
                        f"{unit.name} LUT read past the table (entry {lut.entry})")
            return 0
        return value

    def _write_unit(self, unit: GroupedUnit, at: int, reg: RegisterInfo, value: int) -> None:
        role = self._role.get(reg.address)
        if reg.double:
            group = unit.producer
            if unit.op_en(group):
                self._fault("busy group", reg.address, value,
                            f"{reg.name}: group {group} of {unit.name} is enabled; the write is dropped")
                return
            unit.store(group, at, (unit.load(group, at) & ~reg.write_mask) | (value & reg.write_mask))
            if at == unit.op_enable and value & 1:
                self._check_all()
        elif role is None:
            unit.store_single(at, (unit.load(0, at) & ~reg.write_mask) | (value & reg.write_mask))
        elif role == "S_POINTER":
            unit.producer = value & 1
        elif role == "S_LUT_ACCESS_CFG":
            f = {b.name: b.get(value) for b in reg.bits}
            if not self.luts[unit.name].configure(f["LUT_TABLE_ID"], f["LUT_ADDR"], f["LUT_ACCESS_TYPE"]):
                table = "LO" if f["LUT_TABLE_ID"] else "LE"
                self._fault("lut range", reg.address, value,
                            f"{unit.name} LUT entry {f['LUT_ADDR']} is past the {table} table")
        elif role == "S_LUT_ACCESS_DATA":
            lut = self.luts[unit.name]
            if lut.write_access and not lut.write(value):
                self._fault("lut range", reg.address, value, f"{unit.name} LUT write past the table")
        # S_STATUS and S_CBUF_FLUSH_STATUS are read only

    # -- BDMA -------------------------------------------------------------------------------------

    def _read_bdma(self, name: str) -> int:
        if name == "STATUS":
            idle = not any(self.bdma.busy) and not self.bdma.queued
            return self.bdma.free | (idle << 8) | (self.bdma.busy[0] << 9) | (self.bdma.busy[1] << 10)
        if name == "CFG_OP":
            return 0  # EN clears once the transfer is queued
        return int(self.bdma.busy[0 if name == "CFG_LAUNCH0" else 1])

    def _write_bdma(self, offset: int, name: str, value: int) -> None:
        if not value & 1:
            return
        if name == "CFG_OP":
            base = self.bases["BDMA"]
            window = bytearray(WINDOW)
            for address, word in self._plain.items():
                if base <= address < base + WINDOW:
                    window[address - base:address - base + 4] = word.to_bytes(4, "little")
            if not self.bdma.push(self._struct("BDMA").from_buffer_copy(window)):
                self._fault("queue full", offset, value,
                            "BDMA CFG_OP with no free slot (STATUS.FREE_SLOT 0): the transfer is dropped")
            return
        group = 0 if name == "CFG_LAUNCH0" else 1
        if self.bdma.busy[group]:
            self._fault("busy launch", offset, value, f"BDMA {name} while group {group} runs; dropped")
            return
        launch = Launch("BDMA", group, {}, {"BDMA": group}, self.bdma.launch(group))
        if "BDMA" in self.active:  # the other group runs: this one follows it (one queue, in order)
            self._bdma_next = launch
        else:
            self.active["BDMA"] = launch
            self._pending.append(launch)

    # -- operations ---------------------------------------------------------------------------------

    def _check_all(self) -> None:
        for processor in ("CONV", "SDP", "PDP", "CDP", "RUBIK"):
            self._check(processor)

    def _check(self, processor: str) -> None:
        if processor in self.active:
            return
        names = PROCESSORS[processor]
        unit = self.units.get(names[0])
        if unit is None or unit.ready() is None:  # the common case, at every enable: nothing to launch
            return
        ready = {n: self.units[n].ready() for n in names if n in self.units}
        main = ready[names[0]]
        assert main is not None
        if processor == "CONV" and any(g is None for g in ready.values()):
            return
        if len(names) == 2 and ready.get(names[1]) is None:
            if self._needs_rdma(processor, main):
                return
            del ready[names[1]]
        groups = {n: g for n, g in ready.items() if g is not None}
        views = {n: self.units[n].snapshot(g) for n, g in groups.items()}
        lut = self.luts.get(processor)
        launch = Launch(processor, main, views, groups, (), tuple(lut.le) if lut else (),
                        tuple(lut.lo) if lut else ())
        self.active[processor] = launch
        self._pending.append(launch)

    def _needs_rdma(self, processor: str, group: int) -> bool:
        """Whether the core block's group reads through its RDMA: the input from memory (SDP, PDP), an
        enabled SDP stage with an operand from memory, always for CDP."""
        if processor == "CDP":
            return True
        unit = self.units[processor]

        def field(register: str, name: str) -> int:
            info: RegisterInfo = self.regs.REGISTER_INFO[f"NVDLA_{processor}_{register}_0"]
            return info.field(name).get(unit.load(group, info.address - unit.base))

        if processor == "PDP":
            return field("D_OPERATION_MODE_CFG", "FLYING_MODE") == 1  # OFF_FLYING: from memory
        if field("D_FEATURE_MODE_CFG", "FLYING_MODE") == 0:  # OFF: from memory
            return True
        for stage in ("BS", "BN", "EW"):
            if field(f"D_DP_{stage}_CFG", f"{stage}_BYPASS"):
                continue
            for op in ("ALU", "MUL"):
                if not field(f"D_DP_{stage}_CFG", f"{stage}_{op}_BYPASS") and \
                        field(f"D_DP_{stage}_{op}_CFG", f"{stage}_{op}_SRC") == 1:  # MEM
                    return True
        return False

    def _drain(self) -> None:
        """Hand the launched operations to ``on_launch``, in order; a completion called from there
        queues what it enables, handed on in turn (never recursively)."""
        if self._draining:
            return
        self._draining = True
        try:
            while self._pending:
                launch = self._pending.popleft()
                if self.on_launch is not None and self.active.get(launch.processor) is launch:
                    self.on_launch(launch)
        finally:
            self._draining = False

    def complete(self, processor: str, group: int, ok: bool = True,
                 status: Mapping[str, int] | None = None) -> None:
        """The operation ``processor`` launched for ``group`` is done: its groups' ``OP_EN`` clear and
        their consumers flip, read-only registers of those groups take ``status`` (register name ->
        value: performance counters, NaN counts), and the done interrupts rise. ``ok=False``: the
        groups are released without an interrupt and the failure is a fault (the firmware's wait for
        the interrupt times out; its recovery resets the engine). DlaError when no such operation runs.
        """
        launch = self.active.get(processor)
        if launch is None or launch.group != group:
            running = f"group {launch.group} runs" if launch is not None else "nothing runs"
            raise DlaError(NvError.BadParameter,
                           f"complete({processor!r}, {group}): no such operation ({running})")
        writes = [self._status_write(launch, name, value) for name, value in (status or {}).items()]
        del self.active[processor]
        for unit, group_, at, readonly, value in writes:
            unit.store(group_, at, (unit.load(group_, at) & ~readonly) | (value & readonly))
        if processor == "BDMA":
            self.bdma.complete(group)
            if self._bdma_next is not None:
                self.active["BDMA"], self._bdma_next = self._bdma_next, None
                self._pending.append(self.active["BDMA"])
        for name, g in launch.groups.items():
            if name in self.units:
                self.units[name].done(g)
        if ok:
            bits = 1 << (DONE_BIT[processor] + group) if processor in DONE_BIT else (
                (1 << (CACC_BIT + launch.groups["CACC"])) | (1 << (CDMA_DAT_BIT + launch.groups["CDMA"]))
                | (1 << (CDMA_WT_BIT + launch.groups["CDMA"])))
            self._set_status(self._status | bits)
        else:
            self._fault("operation failed", None, None,
                        f"{processor} group {group} failed: no done interrupt")
        self._check_all()
        self._drain()

    def _status_write(self, launch: Launch, name: str,
                      value: int) -> tuple[GroupedUnit, int, int, int, int]:
        """Where a status value of ``complete`` goes: (block, group, offset, read-only bits, value)."""
        where = self._status_where.get(name)
        if where is None:
            info = self.regs.REGISTER_INFO.get(name)
            unit = None if info is None else self._unit_of.get(info.address // WINDOW)
            if info is not None and unit is not None and info.double:
                where = self._status_where[name] = (unit, info.address - unit.base,
                                                    info.read_mask & ~info.write_mask)
        if where is None or where[0].name not in launch.groups or not isinstance(value, int) or \
                not 0 <= value <= WORD:
            raise DlaError(NvError.BadParameter, f"complete({launch.processor!r}): status {name} = {value!r} "
                                                 "is not a register of its groups or not 32 bits")
        unit, at, readonly = where
        return unit, launch.groups[unit.name], at, readonly, value


_BDMA_REGS = ("CFG_OP", "CFG_LAUNCH0", "CFG_LAUNCH1", "STATUS")
_ROLES = ("_S_STATUS_0", "_S_POINTER_0", "_S_CBUF_FLUSH_STATUS_0", "_S_LUT_ACCESS_CFG_0",
          "_S_LUT_ACCESS_DATA_0")
_ALL_NAMES = frozenset({"CFGROM", "GLB", "GEC", "MCIF", "CVIF", "BDMA", "CDMA", "CSC", "CMAC_A", "CMAC_B",
                        "CACC", "SDP_RDMA", "SDP", "PDP_RDMA", "PDP", "CDP_RDMA", "CDP", "RBK"})
