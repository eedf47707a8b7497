"""Compute units of the virtual device: XRT's kernel execution models AP_CTRL_HS, AP_CTRL_CHAIN and
AP_CTRL_NONE at the register level, driven by a host-side loop as a KMD drives them."""

from __future__ import annotations

import struct
import threading

import numpy as np
import pytest

from pydla import DlaError, NvError
from pydla.deviceapi.generated import dla_regs as R
from pydla.hw.device import VirtualDevice
from tests.hw.cu_driver import (
    AP_CONTINUE,
    AP_DONE,
    AP_IDLE,
    AP_READY,
    AP_START,
    ARGS,
    CTRL,
    CTX,
    ERROR,
    ERROR_EXEC,
    EXECS,
    GIE,
    IER,
    ISR,
    base,
    clear_cu_interrupts,
    run_requests,
    sequence,
    write_addr,
)

HS_SEQUENCE = "START1=>DONE1=>START2=>DONE2=>START3=>DONE3"
CHAIN_SEQUENCE = "START1=>START2=>START3=>DONE1=>START4=>DONE2=>START5=>DONE3=>DONE4=>DONE5"


@pytest.fixture
def dev() -> VirtualDevice:
    return VirtualDevice("full", mode="deterministic")


def test_hs_three_requests_run_one_at_a_time(dev: VirtualDevice) -> None:
    run_requests(dev, "noop_hs", 3)
    assert sequence(dev, "noop_hs") == HS_SEQUENCE


def test_chain_depth_three_five_requests_overlap_and_finish_in_order(dev: VirtualDevice) -> None:
    run_requests(dev, "noop_chain", 5)
    assert sequence(dev, "noop_chain") == CHAIN_SEQUENCE
    kinds = [str(e) for e in dev.cu_events("noop_chain") if e.kind == "CONTINUE"]
    assert kinds == ["CONTINUE1", "CONTINUE2", "CONTINUE3", "CONTINUE4", "CONTINUE5"]
    cycles = [e.cycle for e in dev.cu_events("noop_chain")]
    assert cycles == sorted(cycles)


def test_step_mode_reproduces_the_sequences() -> None:
    dev = VirtualDevice("full", mode="step")
    b = base(dev, "noop_chain")
    started = done = 0
    while done < 5:
        ctrl = dev.reg_read(b)
        if ctrl & AP_DONE:
            done += 1
            dev.reg_write(b, AP_CONTINUE)
        elif started < 5 and ctrl & AP_READY:
            dev.reg_write(b, AP_START)
            started += 1
        else:
            assert dev.step()
    assert sequence(dev, "noop_chain") == CHAIN_SEQUENCE
    assert not dev.step()


def test_threaded_units_keep_the_rules() -> None:
    dev = VirtualDevice("full", mode="threaded")
    try:
        run_requests(dev, "noop_hs", 3)
        assert sequence(dev, "noop_hs") == HS_SEQUENCE
        run_requests(dev, "noop_chain", 6)
        events = [e for e in dev.cu_events("noop_chain") if e.kind in ("START", "DONE")]
        assert [e.n for e in events if e.kind == "DONE"] == [1, 2, 3, 4, 5, 6]  # in order
        in_flight = peak = 0
        for e in events:
            in_flight += 1 if e.kind == "START" else -1
            peak = max(peak, in_flight)
        assert peak <= 3
        # Each execution took its latency (100,000 cycles at 1000 MHz) in wall time.
        start1, done1 = events[0].cycle, next(e.cycle for e in events if str(e) == "DONE1")
        assert done1 - start1 >= 100_000
    finally:
        dev.close()


def test_hs_control_bits(dev: VirtualDevice) -> None:
    b = base(dev, "noop_hs")
    assert dev.reg_read(b) == AP_IDLE | AP_READY
    dev.reg_write(b, AP_START)
    assert dev.reg_read(b) == 0  # accepted (ap_start cleared), running: neither idle nor ready
    dev.reg_write(b, AP_START)  # a start while busy waits, as HLS's level ap_start does
    assert dev.reg_read(b) == AP_START
    assert dev.units.advance()
    # Execution 1 is done and the waiting start is accepted at once.
    assert dev.reg_read(b) == AP_DONE
    assert dev.reg_read(b) == 0  # ap_done is clear on read
    assert dev.units.advance()
    assert dev.reg_read(b) == AP_DONE | AP_IDLE | AP_READY
    assert dev.reg_read(b) == AP_IDLE | AP_READY
    assert dev.reg_read(b + EXECS) == 2


def test_chain_holds_done_until_continue(dev: VirtualDevice) -> None:
    b = base(dev, "noop_chain")
    dev.reg_write(b, AP_START)
    assert dev.reg_read(b) == 0  # one initiation interval before the next start
    dev.units.advance()
    assert dev.reg_read(b) == AP_READY
    dev.reg_write(b, AP_START)
    dev.units.advance(10**6)  # both finished long ago
    assert dev.reg_read(b) == AP_DONE | AP_READY
    assert dev.reg_read(b) == AP_DONE | AP_READY  # not cleared by reading
    dev.reg_write(b, AP_CONTINUE)
    assert dev.reg_read(b) == AP_DONE | AP_READY  # the second's done shows at once
    dev.reg_write(b, AP_CONTINUE)
    assert dev.reg_read(b) == AP_IDLE | AP_READY
    dev.reg_write(b, AP_CONTINUE)  # nothing to acknowledge: no effect
    assert [str(e) for e in dev.cu_events("noop_chain")][-2:] == ["DONE2", "CONTINUE2"]


def test_interrupts_reach_glb_and_the_line(dev: VirtualDevice) -> None:
    raised: list[int] = []
    dev.connect_irq(lambda: raised.append(dev.reg_read(R.GLB_INTR_STATUS)))
    b = base(dev, "noop_hs")
    dev.reg_write(b + IER, 1)  # ap_done
    run_requests(dev, "noop_hs", 1)
    assert dev.reg_read(b + ISR) == 1 and raised == []  # GIE off: the ISR bit only
    dev.reg_write(b + ISR, 1)  # toggle on write: cleared
    assert dev.reg_read(b + ISR) == 0
    dev.reg_write(b + GIE, 1)
    run_requests(dev, "noop_hs", 1)
    assert raised == [1 << 30]
    assert dev.reg_read(R.GLB_CU_INTR_STATUS) == 1 << 1  # noop_hs has m_interrupt_id 1
    dev.reg_write(R.GLB_INTR_STATUS, 1 << 30)  # bit 30 stays while cu_intr_status has a bit
    assert dev.reg_read(R.GLB_INTR_STATUS) == 1 << 30
    dev.reg_write(R.GLB_CU_INTR_STATUS, 1 << 1)  # the unit still interrupts: the bit stays
    assert dev.reg_read(R.GLB_CU_INTR_STATUS) == 1 << 1
    assert clear_cu_interrupts(dev) == [1]
    assert dev.reg_read(R.GLB_CU_INTR_STATUS) == 0 and dev.reg_read(R.GLB_INTR_STATUS) == 0
    # The ready interrupt: a start accepted (its arguments taken).
    dev.reg_write(b + IER, 2)
    dev.reg_write(b, AP_START)
    assert dev.reg_read(b + ISR) == 2 and len(raised) == 2
    dev.reg_write(R.GLB_INTR_MASK, 1 << 30)  # masked: no call of the line
    clear_cu_interrupts(dev)
    dev.units.advance()
    dev.reg_write(b, AP_START)
    assert len(raised) == 2


def test_a_unit_without_m_int_enable_never_interrupts(dev: VirtualDevice) -> None:
    # The stream unit has m_int_enable 0: its GIE/IER/ISR are not even connected (AP_CTRL_NONE).
    b = base(dev, "scale")
    dev.reg_write(b + GIE, 1)
    assert dev.reg_read(b + GIE) == 0 and dev.reg_read(b + CTRL) == 0
    assert dev.reg_read(R.GLB_CU_INTR_STATUS) == 0


def test_vadd_adds_in_the_context_the_host_programs(dev: VirtualDevice) -> None:
    ctx = dev.iommu.create_context()
    n = 1000
    bos = [dev.memory.allocate(4 * n) for _ in range(3)]
    iovas = [dev.iommu.map(ctx, bo) for bo in bos]
    a, b_ = np.linspace(-1, 1, n, dtype=np.float32), np.arange(n, dtype=np.float32)
    bos[0].array.view(np.float32)[:], bos[1].array.view(np.float32)[:] = a, b_

    def program(b: int, i: int) -> None:
        for k, iova in enumerate(iovas):
            write_addr(dev, b + ARGS + 8 * k, iova)
        dev.reg_write(b + ARGS + 24, n)
        dev.reg_write(b + CTX, ctx)

    run_requests(dev, "vadd", 1, program)
    np.testing.assert_array_equal(bos[2].array.view(np.float32), a + b_)
    vb = base(dev, "vadd")
    assert dev.reg_read(vb + ERROR) == 0
    # Another context does not see these buffers: the execution completes with an MMU fault.
    other = dev.iommu.create_context()
    dev.reg_write(vb + CTX, other)
    dev.reg_write(vb, AP_START)
    dev.units.advance()
    assert dev.reg_read(vb) & AP_DONE
    assert dev.reg_read(vb + ERROR) == R.dla_hw_error_e.MMU_FAULT and dev.reg_read(vb + ERROR_EXEC) == 2
    assert "MMU fault" in dev.cu_log("vadd")[-1]
    dev.reg_write(vb + ERROR, 0)
    assert dev.reg_read(vb + ERROR) == 0


def test_stream_unit_scales_int16_samples(dev: VirtualDevice) -> None:
    b = base(dev, "scale")
    x = np.arange(-20000, 20000, 3, dtype=np.int16)
    dev.cu_stream_write("scale", x.tobytes())  # reset values: scale 1, offset 0
    np.testing.assert_array_equal(np.frombuffer(dev.cu_stream_read("scale", x.nbytes), np.int16), x)
    # Scalar parameters only through register writes (xclRegWrite).
    dev.reg_write(b + ARGS, struct.unpack("<I", struct.pack("<f", 2.5))[0])
    dev.reg_write(b + ARGS + 4, struct.unpack("<I", struct.pack("<f", -3.0))[0])
    dev.cu_stream_write("scale", x.tobytes())
    y = np.frombuffer(dev.cu_stream_read("scale", x.nbytes), np.int16)
    np.testing.assert_array_equal(y, np.clip(np.rint(x * 2.5 - 3.0), -32768, 32767).astype(np.int16))
    assert dev.reg_read(b + EXECS) > 0 and dev.reg_read(b + 0xF18) == 0 and dev.reg_read(b + 0xF1C) == 0
    assert dev.cu_events("scale")[0].kind == "START"


def test_stream_waits_time_out_and_name_the_unit(dev: VirtualDevice) -> None:
    with pytest.raises(DlaError) as e:
        dev.cu_stream_read("scale", 4, timeout_s=0.05)
    assert e.value.code == NvError.Timeout and "scale" in str(e.value)
    with pytest.raises(DlaError) as e:
        dev.cu_stream_write("scale", b"\0" * (3 << 16), timeout_s=0.05)  # more than both FIFOs hold
    assert e.value.code == NvError.Timeout
    with pytest.raises(DlaError) as e:
        dev.cu_stream_write("noop_hs", b"\0\0")
    assert e.value.code == NvError.NotSupported
    with pytest.raises(DlaError) as e:
        dev.cu_events("nosuch")
    assert "noop:noop_hs" in str(e.value)


def test_threaded_stream() -> None:
    dev = VirtualDevice("full", mode="threaded")
    try:
        x = np.arange(100_000, dtype=np.int16)  # more than a FIFO: writer and reader overlap
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.append(dev.cu_stream_read("scale", x.nbytes, 20)))
        reader.start()
        dev.cu_stream_write("scale", x.tobytes(), 20)
        reader.join(30)
        np.testing.assert_array_equal(np.frombuffer(out[0], np.int16), x)
    finally:
        dev.close()


def test_bus_errors_outside_windows_and_unaligned(dev: VirtualDevice) -> None:
    b = base(dev, "noop_hs")
    before = dev.bus_errors
    assert dev.reg_read(0x9000) == 0  # between the DLA's registers and the first unit
    dev.reg_write(b + 2, 1)  # unaligned
    last = max(cu.m_base_address + cu.window for cu in dev.config.ip_layout)
    assert dev.reg_read(last) == 0  # past the last unit
    assert dev.bus_errors == before + 3
    assert dev.reg_read(b + 0x8000) == 0  # inside the window, no register: reads 0
    assert dev.bus_errors == before + 3


def test_device_reset_resets_units(dev: VirtualDevice) -> None:
    b = base(dev, "noop_chain")
    dev.reg_write(b + ARGS, 7)
    dev.reg_write(b, AP_START)
    dev.reg_write(R.GLB_RESET, 1 << 31)
    assert dev.reg_read(b) == AP_IDLE | AP_READY and dev.reg_read(b + ARGS) == 0
    assert not dev.units.advance()


def test_register_trace_names_unit_registers(dev: VirtualDevice) -> None:
    trace = dev.record_trace()
    b = base(dev, "noop_hs")
    dev.reg_write(b, AP_START)
    dev.reg_read(b + ISR)
    assert [str(t) for t in trace] == ["W noop_hs.CTRL = 0x1", "R noop_hs.ISR = 0x0"]


def test_polling_moves_time_only_when_the_host_waits(dev: VirtualDevice) -> None:
    b = base(dev, "noop_hs")
    dev.reg_write(b, AP_START)
    t0 = dev.units.clock
    assert dev.reg_read(b) == 0 and dev.units.clock == t0  # the first look is not a wait
    assert dev.reg_read(b) == AP_DONE | AP_IDLE | AP_READY  # the same value again: it waits
    assert dev.units.clock == t0 + 100_000
