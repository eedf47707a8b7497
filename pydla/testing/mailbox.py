"""A bare host side of the headed-mode mailbox, for tests and fuzzing: raw bytes in, messages out.

It does what :class:`pydla.kmd.headed.HeadedEngine` does to reach the firmware (a mailbox buffer in a
context of its own, GLB mcu_mbox_*, the doorbell) and nothing more, so that a test can write any bytes
into the command ring, valid or not, and read what the firmware answered.

Usage::

    dev = VirtualDevice("full-headed")
    box = MailboxClient(dev)
    rsp = box.call(api.version_query_cmd.new())
    box.send_raw(b"\\x10\\x00\\x00\\x00\\xff\\x7f\\x01\\x00" + bytes(8))   # an unknown id
    print(box.receive())
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.runtime import Message, MessageType, decode
from pydla.errors import DlaError, NvError
from pydla.firmware.headed_ring import Layout, Ring
from pydla.kmd.bo import BufferObject

if TYPE_CHECKING:
    from pydla.hw.device import VirtualDevice
    from pydla.testing.fuzz import Target


class MailboxClient:
    """See the module docstring. ``timeout_s`` bounds every wait for an answer."""

    def __init__(self, device: VirtualDevice, *, timeout_s: float = 2.0, lists_size: int = 65536) -> None:
        self.device = device
        self.timeout_s = timeout_s
        self.port = VirtualDevicePort(device)
        self.ctx = self.port.dla_create_context()
        self.layout = Layout.default(lists_size)
        self.bo = self.port.dla_alloc(self.layout.size)
        self.iova = self.port.dla_map(self.ctx, self.bo)
        self.mem = self.bo.array
        self.tag = 0
        self.attach()

    def attach(self) -> None:
        self.layout.write_header(self.mem)
        self.cmd = Ring(self.mem, self.layout.cmd, producer=True)
        self.rsp = Ring(self.mem, self.layout.rsp, producer=False)
        self.evt = Ring(self.mem, self.layout.evt, producer=False)
        for reg, value in ((R.GLB_MCU_MBOX_BASE_LO, self.iova & 0xFFFFFFFF),
                           (R.GLB_MCU_MBOX_BASE_HI, self.iova >> 32), (R.GLB_MCU_MBOX_CTX, self.ctx),
                           (R.GLB_MCU_MBOX_SIZE, self.layout.size)):
            self.port.dla_reg_write(reg, value)
        deadline = time.monotonic() + self.timeout_s
        while not self.status() & R.mcu_status_e.ATTACHED:
            if time.monotonic() > deadline:
                raise DlaError(NvError.Timeout,
                               f"the firmware did not attach (mcu_status {self.status():#x})")
            time.sleep(0.0005)

    def status(self) -> int:
        return self.port.dla_reg_read(R.GLB_MCU_STATUS)

    def send_raw(self, data: bytes) -> None:
        """Write ``data`` as one message into the command ring (whatever it says) and ring the bell."""
        if not self.cmd.write(data):
            raise DlaError(NvError.Busy, "the command ring is full")
        self.port.dla_reg_write(R.GLB_MCU_DOORBELL, 1)

    def send(self, msg: Message) -> int:
        """Send a command with a fresh tag; returns the tag."""
        self.tag += 1
        msg.header.tag = self.tag
        self.send_raw(bytes(msg))
        return self.tag

    def receive(self, wait_s: float = 0.0) -> list[Message]:
        """The responses and events posted so far (waiting up to ``wait_s`` for the first)."""
        deadline = time.monotonic() + wait_s
        out: list[Message] = []
        while True:
            for ring in (self.rsp, self.evt):
                while (data := ring.read()) is not None:
                    out.append(decode(api.API, data, allow_longer=True))
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(0.0005)

    def call(self, msg: Message) -> Message:
        """Send a command and return its response (events that came meanwhile are dropped)."""
        tag = self.send(msg)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            for m in self.receive(wait_s=0.01):
                if m.MSG_TYPE == MessageType.RESPONSE and m.header.command.tag == tag:
                    return m
        raise DlaError(NvError.Timeout, f"no response to {type(msg).__name__} (tag {tag}) within "
                                        f"{self.timeout_s} s (mcu_status {self.status():#x})")


class _Buffers:
    """Buffer objects of one context through the port (what TaskBuilder's ``load`` asks of a KMD)."""

    def __init__(self, port: VirtualDevicePort, ctx: int) -> None:
        self.port = port
        self.ctx = ctx
        self.bos: dict[int, tuple[BufferObject, int]] = {}

    def bo_create(self, ctx: int, size: int) -> int:
        bo = self.port.dla_alloc(size)
        self.bos[bo.handle] = (bo, self.port.dla_map(self.ctx, bo))
        return bo.handle

    def bo_array(self, ctx: int, handle: int) -> npt.NDArray[np.uint8]:
        return self.bos[handle][0].array


def pooling_task_in_lists(dev: VirtualDevice) -> tuple[MailboxClient, int, int, int]:
    """A mailbox client of the headed ``dev`` after the handshake, and a real network (one PDP
    pooling) loaded into a context of its own with its address list written in the lists area:
    (client, context, the list's offset in the mailbox, its number of entries): what a
    task_submit_list_cmd names."""
    from pydla.loadable.taskbuilder import TaskBuilder

    box = MailboxClient(dev)
    box.call(api.version_query_cmd.new())
    ctx = box.port.dla_create_context()
    tb = TaskBuilder()
    tb.pdp(tb.cube("x", (2, 4, 4)), tb.cube("y", (2, 2, 2)), kernel=(2, 2), stride=(2, 2))
    buffers = _Buffers(box.port, ctx)
    loaded = tb.build().load(buffers, ctx)
    entries = np.array([(buffers.bos[a.handle][1] + a.offset, buffers.bos[a.handle][0].size - a.offset)
                        for a in loaded.addresses], dtype="<u8")
    lists = box.layout.lists.offset
    box.mem[lists:lists + entries.nbytes] = entries.view(np.uint8).reshape(-1)
    return box, ctx, lists, len(entries)


def mailbox_target() -> Target:
    """The firmware's command handling: each input is written as one message into the command ring
    of a headed device (deterministic mode) whose firmware already did the handshake. The firmware
    must answer (an error status is a refusal), keep running (mcu_status never STOPPED) and still
    answer a version query afterwards. Seeds: every command, a task_submit_list of a real network
    (its address list in the lists area, its buffers in a context of their own)."""
    from pydla.hw.device import VirtualDevice
    from pydla.testing.fuzz import Target

    dev = VirtualDevice("full-headed")
    box, ctx, lists, count = pooling_task_in_lists(dev)
    seeds = [bytes(m) for m in (
        api.version_query_cmd.new(tag=1),
        api.task_submit_list_cmd.new(tag=2, address_list=box.iova + lists, task_id=7,
                                     num_addresses=count, context_id=ctx),
        api.task_status_cmd.new(tag=3, task_id=7), api.abort_cmd.new(tag=4, task_id=7, context_id=ctx),
        api.reset_cmd.new(tag=5, engine_mask=1 << 3, scope=api.reset_scope_e.ENGINE),
        api.task_submit_cmd.new(tag=6, task_id=8))]
    bad = {int(s) for s in api.dla_status_e if s != api.dla_status_e.OK}

    def check(data: bytes) -> None:
        if len(data) > 256:
            raise DlaError(NvError.InvalidSize, "longer than a message may be")
        box.send_raw(data)
        answers = box.receive()
        mcu = dev.mcu
        assert mcu is not None
        if mcu.stopped is not None:
            stopped, mcu.stopped = mcu.stopped, None
            raise RuntimeError(f"the firmware stopped: {stopped}")
        try:
            box.call(api.version_query_cmd.new())
        except DlaError as e:
            raise RuntimeError(f"the firmware no longer answers: {e}") from None
        statuses = [int(getattr(m, "status", 0)) for m in answers]
        if any(s in bad for s in statuses):
            raise DlaError(NvError.BadValue, f"answered with {statuses}")

    return Target("mailbox", seeds, check)
