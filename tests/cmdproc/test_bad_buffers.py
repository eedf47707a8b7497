"""A malformed command buffer is refused by the device (cp_status BAD_BUFFER, the field and its value
in cp_error_field / cp_error_value) and the driver reports it as a DlaError naming both; never an
IndexError, never a wrong result. The parser itself never raises anything but CmdBufError."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_regs as R
from pydla.errors import DlaError, NvError
from pydla.firmware.cmdbuf import COMMAND_SIZE, HEADER_SIZE, MAGIC, CmdBufError, parse
from tests.cmdproc.rig import Rig
from tests.kmd.support import conv_sdp_pdp


@pytest.fixture
def rig() -> Iterator[Rig]:
    rig = Rig.make("full")
    rig.load(conv_sdp_pdp())
    rig.run(0)  # the task's command buffer, made at its first submit
    assert not rig.errors and rig.dev.cp.runs == 1
    yield rig
    rig.close()


def _buffer(rig: Rig) -> np.ndarray:
    (entry,) = rig.kmd.cmdbufs._by_graph.values()
    assert entry.bo is not None and entry.ref is not None
    return entry.bo.array[:entry.ref[2]]


def _command(k: int) -> int:
    return HEADER_SIZE + k * COMMAND_SIZE


def _put(memory: np.ndarray, offset: int, fmt: str, value: int) -> None:
    memory[offset:offset + struct.calcsize(fmt)] = np.frombuffer(struct.pack(fmt, value), np.uint8)


def _image(memory: np.ndarray, k: int) -> int:
    return int(struct.unpack_from("<I", memory, _command(k) + 4)[0])


def _consumers(memory: np.ndarray, k: int) -> int:
    return int(struct.unpack_from("<I", memory, _command(k) + 16)[0])


# (what, offset of the field (from the buffer), struct format, bad value, the error's field and value)
CORRUPTIONS = [
    ("magic", lambda m: 0, "<I", 0x12345678, "header: MAGIC = 305419896"),
    ("version", lambda m: 4, "<I", 7, "header: VERSION = 7"),
    ("num_commands 0", lambda m: 8, "<I", 0, "header: NUM_COMMANDS = 0"),
    ("num_commands past the end", lambda m: 8, "<I", 4000, "header: COMMAND_OFFSET = 32"),
    ("command_offset", lambda m: 12, "<I", 1 << 30, f"header: COMMAND_OFFSET = {1 << 30}"),
    ("block", lambda m: _command(2) + 2, "<B", 9, "command 2: BLOCK = 9"),
    ("image_offset", lambda m: _command(1) + 4, "<I", 1 << 28, f"command 1: IMAGE = {1 << 28}"),
    ("image_words 0", lambda m: _command(0) + 8, "<I", 0, "command 0: IMAGE ="),
    ("register op_enable", lambda m: _image(m, 2), "<I", 0x40, "command 2: REGISTER = 64"),
    ("register past the window", lambda m: _image(m, 0), "<I", 0x1000, "command 0: REGISTER = 4096"),
    ("consumer_offset", lambda m: _command(0) + 16, "<I", 0xFFFFFFF0, "command 0: CONSUMERS = 4294967280"),
    ("consumer out of range", lambda m: _consumers(m, 1), "<I", 99, "command 1: CONSUMER = 99"),
    ("dependency_count", lambda m: _command(2) + 12, "<H", 5, "command 2: DEPENDENCY = 5"),
    ("pair flag", lambda m: _command(0) + 3, "<B", 0, "command 0: PAIR = 0"),
]


@pytest.mark.parametrize(("what", "where", "fmt", "value", "named"), CORRUPTIONS,
                         ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_buffer_is_refused_naming_the_field(rig: Rig, what: str, where, fmt: str, value: int,
                                                      named: str) -> None:  # type: ignore[no-untyped-def]
    memory = _buffer(rig)
    good = memory.copy()
    _put(memory, where(memory), fmt, value)
    job = rig.run(1)
    assert len(rig.errors) == 1
    error = rig.errors[0]
    assert error.code == NvError.BadValue
    assert f"task {job.job_id}: the device refused its command buffer: {named}" in error.message
    assert rig.dev.reg_read(R.GLB_CP_STATUS) & 0xF == R.cp_status_e.BAD_BUFFER
    memory[:] = good  # the driver's buffer restored: the next job runs and is right
    assert rig.case is not None and rig.loaded is not None
    expected = rig.case.feed(rig.kmd, rig.ctx, rig.loaded, 2)
    rig.kmd.submit(rig.ctx, rig.loaded.addresses).wait(5000)
    rig.case.check(rig.kmd, rig.ctx, rig.loaded, expected)


def test_registers_naming_no_buffer(rig: Rig) -> None:
    """Written by hand: a size of 0, and an address outside the context's mappings."""
    dev = rig.dev
    for size, base, field, value in ((0, 0x1000, R.cp_field_e.SIZE, 0),
                                     (64, 0x7000_0000, R.cp_field_e.MEMORY, 0x7000_0000)):
        for reg, v in ((R.GLB_CP_BASE_LO, base), (R.GLB_CP_BASE_HI, 0), (R.GLB_CP_CTX, rig.ctx),
                       (R.GLB_CP_SIZE, size), (R.GLB_CP_DOORBELL, 1)):
            dev.reg_write(reg, v)
        assert dev.reg_read(R.GLB_CP_STATUS) == R.cp_status_e.BAD_BUFFER | R.cp_status_e.PRESENT
        assert dev.reg_read(R.GLB_CP_ERROR_FIELD) == field
        assert dev.reg_read(R.GLB_CP_ERROR_VALUE) == value
        assert dev.reg_read(R.GLB_CP_FAILED_OP) == 0xFFFFFFFF  # the header
        assert rig.kmd.engine.pending_events() == 1  # its interrupt: the driver's ISR took it
        rig.kmd.poll()  # (no job of the engine's rang it: nothing to end)
        assert "bad command buffer" in dev.log[-1]


def test_random_corruption_gives_only_cmdbuf_errors(rig: Rig) -> None:
    """20,000 buffers with a few random bytes changed: each parses or is refused with CmdBufError."""
    good = bytes(_buffer(rig))
    blocks = set(rig.dev.state.blocks)
    rng = np.random.default_rng(32)
    refused = 0
    for _ in range(20_000):
        data = bytearray(good)
        for at in rng.integers(0, len(data), rng.integers(1, 4)):
            data[at] = int(rng.integers(0, 256))
        try:
            parse(bytes(data), blocks)
        except CmdBufError as e:
            refused += 1
            assert 1 <= int(e.field) <= 13 and str(e)
    assert refused > 1000
    with pytest.raises(CmdBufError, match="SIZE"):
        parse(good[:HEADER_SIZE - 1], blocks)
    assert struct.unpack_from("<I", good)[0] == MAGIC


def test_a_magic_error_reaches_the_caller_as_a_dla_error(rig: Rig) -> None:
    _put(_buffer(rig), 0, "<I", 0)
    with pytest.raises(DlaError) as info:
        assert rig.loaded is not None
        rig.kmd.submit(rig.ctx, rig.loaded.addresses).wait(5000)
    assert info.value.code == NvError.BadValue and "MAGIC = 0" in info.value.message
