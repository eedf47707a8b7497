"""The driver's trace ring: consistent copies while a threaded device writes and wraps it."""

from __future__ import annotations

import threading

import pytest

from pydla import DlaError, NvError
from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import trace as T
from pydla.deviceapi.trace import read_ring
from pydla.hw.device import VirtualDevice
from pydla.kmd.driver import Kmd
from pydla.kmd.trace import MIN_RING, KmdTrace
from tests.kmd.support import pdp_chain

LAYER, INTERRUPT = int(R.trace_class_e.LAYER), int(R.trace_class_e.INTERRUPT)


def test_snapshots_taken_while_the_device_wraps_the_ring_always_decode() -> None:
    dev = VirtualDevice("full", mode="threaded")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        trace = KmdTrace(kmd, size=MIN_RING, mask=LAYER | INTERRUPT)
        ctx = kmd.open_context()
        case = pdp_chain(4)
        loaded = case.load(kmd, ctx)
        case.feed(kmd, ctx, loaded, 0)
        done = threading.Event()
        failed: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(60):
                    kmd.submit(ctx, loaded.addresses).wait(10_000)
            except BaseException as e:  # reported below (else the loop below waited forever)
                failed.append(e)
            finally:
                done.set()

        worker = threading.Thread(target=work)
        worker.start()
        reads = 0
        last_head = 0
        while not done.is_set() or reads < 3:
            contents = read_ring(trace.snapshot(), T.API)  # never raises: a consistent ring
            assert contents.head >= last_head
            last_head = contents.head
            seqs = [e.seq for e in contents.events]
            if seqs:  # consecutive: nothing torn in the middle
                assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            reads += 1
        worker.join(timeout=30)
        assert not worker.is_alive() and not failed, failed
        final = read_ring(trace.stop(), T.API)
        assert final.dropped > 0  # a 4 KiB ring wrapped many times
        assert sum(e.name == "op_end" for e in final.events) > 0
        assert dev.reg_read(R.GLB_TRACE_SIZE) == 0
        assert trace.snapshot() == trace.stop()  # stopped: the last contents, again
    finally:
        kmd.close()
        dev.close()


def test_a_refused_start_leaves_nothing_behind() -> None:
    dev = VirtualDevice("full")
    kmd = Kmd(VirtualDevicePort(dev))
    try:
        contexts = len(kmd.contexts)
        with pytest.raises(DlaError) as info:
            KmdTrace(kmd, size=MIN_RING + 4, mask=LAYER)
        assert info.value.code == NvError.BadParameter and "multiple of 8" in info.value.message
        first = KmdTrace(kmd, size=MIN_RING, mask=LAYER)
        with pytest.raises(DlaError) as info:
            KmdTrace(kmd, size=MIN_RING, mask=LAYER)
        assert info.value.code == NvError.Busy
        assert len(kmd.contexts) == contexts + 1  # the refused one opened no context
        first.stop()
        assert len(kmd.contexts) == contexts
    finally:
        kmd.close()
        dev.close()
