"""A driver developer's own compute-unit model (``python:package.module:ClassName``), wrapped by the
device in the control block, driven at the register level as HS, CHAIN and NONE, in every mode."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pydla.hw.device import VirtualDevice
from pydla.target.config import parse_config
from tests.hw.cu_driver import ARGS, CTX, ERROR, run_requests, sequence, write_addr
from tests.hw.regs import raw_config

MODEL = "python:tests.hw.cu_user_models:"


def config() -> object:
    common = {"m_type": "IP_KERNEL", "m_int_enable": 1, "window": 0x10000, "latency_cycles": 3000}
    return parse_config(raw_config(ip_layout=[
        {**common, "m_name": "saxpy:saxpy_hs", "m_interrupt_id": 0, "m_ip_control": "AP_CTRL_HS",
         "m_base_address": 0x10000, "model": MODEL + "Saxpy", "max_n": 4096},
        {**common, "m_name": "saxpy:saxpy_chain", "m_interrupt_id": 1, "m_ip_control": "AP_CTRL_CHAIN",
         "m_base_address": 0x20000, "model": MODEL + "Saxpy", "pipeline_depth": 3},
        {**common, "m_name": "xor:xor", "m_interrupt_id": 2, "m_ip_control": "AP_CTRL_NONE",
         "m_base_address": 0x30000, "m_int_enable": 0, "model": MODEL + "XorStream", "fifo_bytes": 256,
         "chunk_bytes": 64},
    ]))


@pytest.mark.parametrize("mode", ["deterministic", "step", "threaded"])
def test_user_model_in_all_three_execution_models(mode: str) -> None:
    dev = VirtualDevice(config(), mode=mode)  # type: ignore[arg-type]
    try:
        ctx = dev.iommu.create_context()
        n = 256
        x_bo, y_bo = dev.memory.allocate(4 * n), dev.memory.allocate(4 * n)
        x_iova, y_iova = dev.iommu.map(ctx, x_bo), dev.iommu.map(ctx, y_bo)
        x = np.arange(n, dtype=np.float32)
        x_bo.array.view(np.float32)[:] = x

        def program(b: int, i: int) -> None:
            write_addr(dev, b + ARGS, x_iova)
            write_addr(dev, b + ARGS + 8, y_iova)
            dev.reg_write(b + ARGS + 16, n)
            dev.reg_write(b + ARGS + 20, struct.unpack("<I", struct.pack("<f", float(i + 1)))[0])
            dev.reg_write(b + CTX, ctx)

        for name, count in (("saxpy_hs", 3), ("saxpy_chain", 5)):
            y_bo.array[:] = 0
            if mode == "step":
                drive_stepping(dev, name, count, program)
            else:
                run_requests(dev, name, count, program)
            # Each execution added (i + 1) * x: the arguments latched per start.
            np.testing.assert_array_equal(y_bo.array.view(np.float32), x * sum(range(1, count + 1)))
        if mode != "threaded":
            assert sequence(dev, "saxpy_hs") == "START1=>DONE1=>START2=>DONE2=>START3=>DONE3"
            assert sequence(dev, "saxpy_chain") == \
                "START1=>START2=>START3=>DONE1=>START4=>DONE2=>START5=>DONE3=>DONE4=>DONE5"
        # The model's own error: the execution completes, the unit's error register says why.
        dev.reg_write(0x10000 + ARGS + 16, 5000)
        run_requests(dev, "saxpy_hs", 1) if mode != "step" else drive_stepping(dev, "saxpy_hs", 1, None)
        assert dev.reg_read(0x10000 + ERROR) == 2 and "max_n" in dev.cu_log("saxpy_hs")[-1]
        # The stream unit, its key written as a register (xclRegWrite).
        dev.reg_write(0x30000 + ARGS, 0x5A)
        data = bytes(range(256)) * 4  # more than its 256-byte FIFOs
        if mode == "step":
            dev.cu_stream_write("xor", data[:256])
            while dev.step():
                pass
            got = dev.cu_stream_read("xor", 256, timeout_s=0.1)
            assert got == bytes(b ^ 0x5A for b in data[:256])
        else:
            out = bytearray()
            for k in range(0, len(data), 128):
                dev.cu_stream_write("xor", data[k:k + 128], timeout_s=10)
                out += dev.cu_stream_read("xor", 128, timeout_s=10)
            assert bytes(out) == bytes(b ^ 0x5A for b in data)
    finally:
        dev.close()


def drive_stepping(dev: VirtualDevice, name: str, count: int, program: object) -> None:
    """The driver loop of step mode: the device moves only when stepped."""
    cu = dev.config.compute_unit(name)
    assert cu is not None
    b, chain = cu.m_base_address, cu.m_ip_control == "AP_CTRL_CHAIN"
    started = done = 0
    while done < count:
        ctrl = dev.reg_read(b)
        if ctrl & 2:
            done += 1
            if chain:
                dev.reg_write(b, 16)
        elif started < count and ctrl & 8:
            if callable(program):
                program(b, started)
            dev.reg_write(b, 1)
            started += 1
        else:
            assert dev.step()
