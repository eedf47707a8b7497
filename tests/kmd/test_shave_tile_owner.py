"""A SHAVE tile reached two ways, a compute unit's executions (``shave:tile0``) and the KMD's SHAVE task
lists, never interleaves them: one owner at a time, the other waits its turn (not an error). The
device records tile 0's events in its own order (each under its lock): every kernel task's start
and end and every DMA task, with the context of the push, and every unit execution's begin and end.
A list's events (DMA in, kernel, DMA out) are contiguous, a unit execution holds only its own task,
and the data each wrote in CMX is what the other finds afterwards. In-process (threaded device) and
through the Linux KMD daemon."""

from __future__ import annotations

import dataclasses
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pydla.composition.virtual_port import VirtualDevicePort
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.hw.device import VirtualDevice
from pydla.kmd.cu import CuBuffer
from pydla.kmd.driver import Kmd
from pydla.kmd.tile_owner import LIST, UNIT, TileOwners
from pydla.target.config import load_config
from pydla.testing.fuzz_shave import A0, RET, T0, T1, T2, T3, ZERO, addi, branch, jal, kernel_image, lw, sw
from tests.kmd.shave_lists import ListBuilder

N = 256  # float32 words a list moves through tile 0's CMX
OUT = 0x40000  # the list's output in CMX (its input is at 0)
T4 = 29


GATE = 0x80000  # a word in CMX (outside both kernels' data) a kernel may wait for: the test sets it


def _gate(words: list[int]) -> list[int]:
    """Then, when args[3] is an address, wait until the word there is not 0; return."""
    return [*words, branch(0, T3, ZERO, 12), lw(T4, T3, 0), branch(0, T4, ZERO, -4), RET]


def copy_kernel() -> bytes:
    """The list's kernel: copies args[2] words from args[0] to args[1] (CMX), then waits for the
    gate args[3] (0: none): the tile stays the list's meanwhile."""
    return kernel_image(_gate([lw(T0, A0, 0), lw(T1, A0, 4), lw(T2, A0, 8), lw(T3, A0, 12),
                               branch(0, T2, ZERO, 28), lw(T4, T0, 0), sw(T4, T1, 0), addi(T0, T0, 4),
                               addi(T1, T1, 4), addi(T2, T2, -1), jal(ZERO, -24)]))


def fill_kernel() -> bytes:
    """The unit's kernel: writes args[0] into args[2] words from args[1] (over the list's input and
    output in CMX), then waits for the gate args[3] (0: none)."""
    return kernel_image(_gate([lw(T0, A0, 0), lw(T1, A0, 4), lw(T2, A0, 8), lw(T3, A0, 12),
                               branch(0, T2, ZERO, 20), sw(T0, T1, 0), addi(T1, T1, 4), addi(T2, T2, -1),
                               jal(ZERO, -16)]))


def set_gate(dev: VirtualDevice, value: int) -> None:
    assert dev.shave is not None
    dev.shave.cmx(0)[GATE:GATE + 4] = np.frombuffer(value.to_bytes(4, "little"), np.uint8)


class Timeline:
    """Tile 0's events in the device's order: (kind, context), kind one of start/end (a kernel
    task), dma (a DMA task done), unit-begin/unit-end (an execution of the tile's compute unit)."""

    def __init__(self, dev: VirtualDevice) -> None:
        shave = dev.shave
        assert shave is not None
        self.events: list[tuple[str, int]] = []
        tile, ctx_of = shave.tiles[0], {}
        push, on_task, step, run_task = tile.push, tile.on_task, shave.dma.step, shave.run_task

        def rec_push(pushed: Any) -> None:
            ctx_of[pushed.seq] = pushed.ctx
            push(pushed)

        def rec_task(index: int, seq: int, duration: int | None, error: int) -> None:
            self.events.append(("start" if duration is None else "end", ctx_of.get(seq, -1)))
            if on_task is not None:
                on_task(index, seq, duration, error)

        def rec_step() -> bool:
            ctx = shave.dma.fifo[0].ctx if shave.dma.fifo else -1
            done = step()
            if done:
                self.events.append(("dma", ctx))
            return done

        def rec_run(index: int, ctx: int, addr: int) -> str | None:
            self.events.append(("unit-begin", ctx))
            try:
                return run_task(index, ctx, addr)
            finally:
                self.events.append(("unit-end", ctx))

        tile.push, tile.on_task, shave.dma.step, shave.run_task = (  # type: ignore[method-assign]
            rec_push, rec_task, rec_step, rec_run)

    def check_turns(self, list_ctx: int, unit_ctx: int, lists: int, units: int) -> None:
        events = list(self.events)
        inside = None
        for i, (kind, ctx) in enumerate(events):
            if kind == "unit-begin":
                assert inside is None and ctx == unit_ctx, events[max(0, i - 6):i + 2]
                inside = ctx
            elif kind == "unit-end":
                inside = None
            else:
                assert inside is None or ctx == inside, f"{kind} of context {ctx} in a unit execution: " \
                                                        f"{events[max(0, i - 6):i + 2]}"
        mine = [i for i, (_, ctx) in enumerate(events) if ctx == list_ctx]
        assert len(mine) == 4 * lists, (len(mine), lists)
        for k in range(lists):
            first, last = mine[4 * k], mine[4 * k + 3]
            run = events[first:last + 1]
            assert [kind for kind, _ in run] == ["dma", "start", "end", "dma"], f"list run {k}: {run}"
        assert sum(kind == "unit-begin" for kind, _ in events) == units


class Lists:
    """SHAVE task lists of one context through tile 0: DMA x in, copy it across CMX, DMA it out."""

    def __init__(self, kmd: Any, ctx: int, gated: bool, submit: Callable[[ListBuilder, Any], None]) -> None:
        self.x = np.arange(N, dtype=np.float32) + 0.5
        lb = ListBuilder(kmd, ctx)
        src, self.out = lb.put(self.x), lb.alloc(self.x.nbytes)
        lb.dma(src, tile=0, cmx_offset=0, size=self.x.nbytes, to_cmx=True, update=[0])
        args = struct.pack("<4I", S.WIN_F, S.WIN_F + OUT, N, S.WIN_F + GATE if gated else 0)
        lb.act(0, "copy", args, image=copy_kernel(), wait=[0], update=[1], kernel_id=5)
        lb.dma(self.out, tile=0, cmx_offset=OUT, size=self.x.nbytes, to_cmx=False, wait=[1], update=[2])
        self.lb, self.addresses, self._submit = lb, lb.addresses(notify=[2]), submit

    def run(self) -> None:
        self.lb.array(self.out)[:] = 0
        self._submit(self.lb, self.addresses)
        got = self.lb.read(self.out, np.float32, self.x.shape)
        assert np.array_equal(got, self.x), "a list's data changed under it in CMX"


def unit_task(put: Callable[[bytes], tuple[int, Any]], gated: bool, value: int = 0x7F7F7F7F) -> Any:
    """An ActKernelTask of the unit's kernel (``put(data)``: its device address and a handle)."""
    elf = fill_kernel()
    code, _ = put(elf)
    args = struct.pack("<4I", value, S.WIN_F, (OUT + 4 * N) // 4, S.WIN_F + GATE if gated else 0)
    inv = S.ActKernelInvocation(kernel_addr=code, kernel_size=len(elf), entry_offset=0,
                                args_addr=put(args)[0], args_size=len(args), tile=0, kernel_id=42)
    return put(bytes(S.ActKernelTask(invocation=inv, wait_mask=0, update_mask=0)))[1]


@pytest.fixture
def threaded() -> Iterator[tuple[VirtualDevice, Kmd]]:
    # The tests hold a kernel spinning at a gate until the other side has asked for the tile: on two
    # loaded cores that can take longer than the device's runaway-kernel budget (2 s of the
    # emulating thread's CPU time) and the driver's hang timeout (2 s without progress), and either
    # then rightly stops the held list (BUDGET, or a TDR that resets the tiles: the unit's execution
    # finds its tile IDLE). Both are tested elsewhere (and below, a TDR of 150 ms); here neither may
    # fire on a job the test itself holds: both as long as the test's own waits (20 s).
    config = load_config("full")
    assert config.shave is not None
    held = dataclasses.replace(config.shave, time_budget_ms=20_000)
    dev = VirtualDevice(dataclasses.replace(config, shave=held), mode="threaded")
    kmd = Kmd(VirtualDevicePort(dev), tdr_ms=20_000)
    yield dev, kmd
    kmd.close()
    dev.close()


def _in_process(kmd: Kmd, gated: bool) -> tuple[int, int, Lists, Any]:
    list_ctx, unit_ctx = kmd.open_context(), kmd.open_context()

    def submit(lb: ListBuilder, addresses: Any) -> None:
        kmd.submit(list_ctx, addresses, timeout_ms=20_000).wait(20_000)

    def put(data: bytes) -> tuple[int, int]:
        handle = kmd.bo_create(unit_ctx, max(len(data), 1))
        kmd.bo_array(unit_ctx, handle)[:len(data)] = np.frombuffer(data, np.uint8)
        return kmd.bo_iova(unit_ctx, handle), handle

    lists = Lists(kmd, list_ctx, gated, submit)
    return list_ctx, unit_ctx, lists, unit_task(put, gated)


def _until(what: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.0005)


def test_each_waits_its_turn(threaded: tuple[VirtualDevice, Kmd]) -> None:
    """Each kernel waits at a gate in CMX that the test opens once the other side has asked for the
    tile: the other side waited, and ran after. (While a tile emulates, the threaded device holds its
    lock: a register access waits for the kernel's end, so the unit's submit runs in a thread.)"""
    dev, kmd = threaded
    timeline = Timeline(dev)
    list_ctx, unit_ctx, lists, task = _in_process(kmd, gated=True)
    set_gate(dev, 1)
    lists.run()  # the first list starts tile 0's runtime kernel (a unit execution needs it running)
    owners, unit = kmd.shave.owners, kmd.cus.unit("shave:tile0")
    # A unit execution submitted while a list owns the tile waits for the list's end.
    set_gate(dev, 0)
    job = kmd.submit(list_ctx, lists.addresses, timeout_ms=20_000)
    _until(lambda: (owners.owner(0) or "").startswith(LIST))
    executions: list[Any] = []
    submitter = threading.Thread(target=lambda: executions.append(
        kmd.cu_submit(unit_ctx, "shave:tile0", [CuBuffer(task)], timeout_ms=20_000)))
    submitter.start()
    _until(lambda: len(unit.queue) == 1)
    set_gate(dev, 1)
    submitter.join(20)
    try:
        executions[0].wait(20_000)
    except DlaError as e:  # the device's reason is in the unit's log (the KMD sees the error code)
        raise AssertionError(f"{e}; the unit's log: {list(dev.cu_log('tile0'))}; the list: {job.error}") \
            from e
    job.wait(20_000)
    assert owners.waits[UNIT] == 1
    # A list submitted while a unit execution owns the tile waits for it (and finds CMX as the
    # execution left it: its DMA in comes after).
    set_gate(dev, 0)
    ex = kmd.cu_submit(unit_ctx, "shave:tile0", [CuBuffer(task)], timeout_ms=20_000)
    _until(lambda: (owners.owner(0) or "").startswith(UNIT))
    done = threading.Event()
    threading.Thread(target=lambda: (lists.run(), done.set())).start()
    _until(lambda: owners.waits[LIST] == 1)
    assert not done.is_set()
    set_gate(dev, 1)
    assert done.wait(20)
    ex.wait(20_000)
    timeline.check_turns(list_ctx, unit_ctx, lists=3, units=2)
    assert owners.owner(0) is None


def test_concurrent_lists_and_unit_executions_never_interleave(threaded: tuple[VirtualDevice, Kmd]) -> None:
    dev, kmd = threaded
    timeline = Timeline(dev)
    list_ctx, unit_ctx, lists, task = _in_process(kmd, gated=False)
    lists.run()
    errors: list[BaseException] = []

    def run_lists() -> None:
        try:
            for _ in range(24):
                lists.run()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def run_units() -> None:
        try:
            for _ in range(12):
                executions = [kmd.cu_submit(unit_ctx, "shave:tile0", [CuBuffer(task)], timeout_ms=20_000)
                              for _ in range(3)]
                for ex in executions:
                    ex.wait(20_000)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run_lists), threading.Thread(target=run_units)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    timeline.check_turns(list_ctx, unit_ctx, lists=25, units=36)


def test_a_hung_list_is_recovered_and_then_the_waiting_execution_runs() -> None:
    """The recovery ladder still works for a list that owns the tile: it times out, the tiles are
    reset, the waiting execution gets its turn (and reports that the tile's runtime kernel was
    reset); the next list starts the tile again and executions run."""
    dev = VirtualDevice("full", mode="threaded")
    kmd = Kmd(VirtualDevicePort(dev), tdr_ms=150)
    try:
        list_ctx, unit_ctx, lists, task = _in_process(kmd, gated=False)
        lists.run()
        from tests.kmd.test_shave_faults import hanging_runtime

        stuck = ListBuilder(kmd, list_ctx)
        stuck.act(0, "noop", b"", image=kernel_image([RET]), update=[0])
        job = kmd.submit(list_ctx, stuck.addresses(notify=[0], runtime=hanging_runtime()), timeout_ms=5_000)
        _until(lambda: (kmd.shave.owners.owner(0) or "").startswith(LIST))
        ex = kmd.cu_submit(unit_ctx, "shave:tile0", [CuBuffer(task)], timeout_ms=5_000)
        with pytest.raises(DlaError) as hung:
            job.wait(5_000)
        assert hung.value.code == NvError.Timeout
        with pytest.raises(DlaError) as late:
            ex.wait(5_000)
        assert "not idle in its runtime kernel" in dev.cu_log("tile0")[-1], dev.cu_log("tile0")
        assert late.value.code == NvError.BadValue
        lists.run()
        kmd.cu_submit(unit_ctx, "shave:tile0", [CuBuffer(task)], timeout_ms=5_000).wait(5_000)
    finally:
        kmd.close()
        dev.close()


def test_the_owners_turns() -> None:
    owners, woken = TileOwners(), []
    owners.wake = {LIST: lambda: woken.append(LIST), UNIT: lambda: woken.append(UNIT)}
    assert owners.acquire(UNIT, (0,), "exec 1")
    assert not owners.acquire(LIST, (0, 1), "task 1")  # all or nothing: tile 1 stays free
    assert owners.owner(1) is None and owners.owner(0) == "compute unit (exec 1)"
    owners.release(UNIT, (0,))
    assert woken == [LIST]
    assert not owners.acquire(UNIT, (0,), "exec 2")  # the list asked first: it goes first
    assert owners.acquire(LIST, (0, 1), "task 1") and owners.waits == {LIST: 1, UNIT: 1}
    owners.release(LIST, (0, 1))
    assert woken == [LIST, UNIT]
    assert owners.acquire(UNIT, (0,), "exec 2")
    assert not owners.acquire(LIST, (0,), "task 2")
    owners.withdraw(LIST, (0,))  # the job was dropped: the unit's next execution does not wait for it
    owners.release(UNIT, (0,))
    assert owners.acquire(UNIT, (0,), "exec 3")
    owners.release(UNIT)
    assert owners.owner(0) is None


# -- through the Linux KMD daemon -----------------------------------------------------------------------

@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Any]:
    from pydla.linux import unmount
    from pydla.linux.daemon import KmdDaemon
    from tests.linux.conftest import fuse_unavailable

    reason = fuse_unavailable()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    d = KmdDaemon("full")
    server = d.serve(mnt)
    try:
        yield d, mnt
    finally:
        server.stop(timeout=5.0)
        d.close()
        unmount(str(mnt))


def test_through_the_linux_daemon_they_never_interleave(daemon: Any) -> None:
    import pydla
    from pydla.portability.interface import NvDlaFence, NvDlaTask
    from pydla.portability.linux import LinuxPort

    d, mnt = daemon
    timeline = Timeline(d.devices[0])
    with LinuxPort(mnt) as port, pydla.createRuntime(port) as lists_rt, pydla.createRuntime(port) as units_rt:

        class PortMemory:  # what ListBuilder needs of a driver, over the port's NvDlaGetMem
            mems: dict[int, Any] = {}

            def bo_create(self, ctx: int, size: int) -> int:
                self.mems[len(self.mems) + 1] = port.NvDlaGetMem(lists_rt.handle, size)
                return len(self.mems)

            def bo_array(self, ctx: int, handle: int) -> Any:
                return self.mems[handle][1]

        memory = PortMemory()

        def submit(lb: ListBuilder, entries: Any) -> None:
            sem = port.NvDlaCreateSemaphore(lists_rt.handle)
            addresses = [(memory.mems[e.handle][0], e.offset) for e in entries]
            port.NvDlaSubmit(lists_rt.handle, [NvDlaTask(addresses, post_fences=[NvDlaFence(sem, 1)],
                                                         timeout_ms=20_000)])
            port.NvDlaWaitFence(NvDlaFence(sem, 1), 20_000)

        def put(data: bytes) -> tuple[int, Any]:
            mem = units_rt.allocateSystemMemory(max(len(data), 1))
            mem.bytes_view()[:len(data)] = np.frombuffer(data, np.uint8)
            return mem.device_address, mem

        lists = Lists(memory, 0, False, submit)
        lists.run()
        task = unit_task(put, False)
        unit = pydla.ComputeUnit(units_rt, "shave:tile0")
        errors: list[BaseException] = []

        def run_lists() -> None:
            try:
                for _ in range(10):
                    lists.run()
            except BaseException as e:
                errors.append(e)

        def run_units() -> None:
            try:
                for _ in range(10):
                    unit.start(task).wait(20_000)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=run_lists), threading.Thread(target=run_units)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        contexts = {ctx for _, ctx in timeline.events}
        list_ctx = next(ctx for kind, ctx in timeline.events if kind == "dma")
        (unit_ctx,) = contexts - {list_ctx}
        timeline.check_turns(list_ctx, unit_ctx, lists=11, units=10)
