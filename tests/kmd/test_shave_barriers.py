"""Barriers between DLA operations and SHAVE tasks in one task (the VPUX per-variant barriers): a SHAVE
task waits on a barrier a DLA operation updates, a DLA operation waits on one SHAVE tasks update, both
in one task; in deterministic and threaded mode, headless and headed. The checks of such a task
(barrier ids, producer and consumer counts, cycles named) with their error codes and messages."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np
import pytest

from pydla.deviceapi.generated import dla_task as T
from pydla.errors import DlaError, NvError
from pydla.kernels.build import kernel_elf
from pydla.kmd.driver import COMPLETED, Kmd
from pydla.kmd.port import AddressEntry
from pydla.loadable.mixed_task import BARRIERS_ENTRY, LIST_ENTRY, MixedTask
from pydla.loadable.shave_task import ShaveTaskBuilder
from pydla.loadable.taskbuilder import TaskBuilder
from tests.hw.shave.host import entry_offset
from tests.kmd.shave_lists import F16, clamp_args
from tests.kmd.support import MakeKmd

N = 256  # fp16 elements: one cube of 1x1x256
RT, CLAMP = kernel_elf("runtime"), kernel_elf("clamp")


def _shave(tiles: int = 2) -> ShaveTaskBuilder:
    sb = ShaveTaskBuilder(tiles=tiles, cmx_bytes=2 << 20)
    sb.runtime(sb.ref("rt", len(RT)))
    return sb


def _clamp(sb: ShaveTaskBuilder, src: str, dst: str, lo: float, hi: float, wait: list[int],
           update: list[int], kernel_reads: int = 0) -> None:
    """DMA ``src`` into tile 0, clamp it, DMA it out to ``dst``: the first DMA waits on ``wait``, the
    last updates ``update``."""
    loaded, computed = sb.barrier(), sb.barrier()
    nbytes = N * 2
    sb.dma(sb.ref(src, nbytes), tile=0, cmx_offset=0, to_cmx=True, line_size=nbytes, wait=wait,
           update=[loaded])
    args = clamp_args(kernel_reads, 0x1000, (N,), F16, lo, hi)
    sb.invoke(sb.ref("clamp", len(CLAMP)), entry_offset=entry_offset(CLAMP), args=bytes(args),
              data=bytes(args.data), tile=0, kernel_id=7, wait=[loaded], update=[computed])
    sb.dma(sb.ref(dst, nbytes), tile=0, cmx_offset=0x1000, to_cmx=False, line_size=nbytes,
           wait=[computed], update=update)


def _run(kmd: Kmd, mixed: MixedTask, inputs: dict[str, np.ndarray],
         mutate: Callable[[bytearray], None] | None = None) -> dict[str, np.ndarray]:
    ctx = kmd.open_context()
    built = mixed.build()
    if mutate is not None:
        desc = bytearray(built.descriptors)
        mutate(desc)
        built.descriptors = bytes(desc)
    loaded = built.load(kmd, ctx)
    for name, data in (("rt", RT), ("clamp", CLAMP), *((k, v.tobytes()) for k, v in inputs.items())):
        if name in loaded.handles:  # (a list of DMA tasks only has no kernel)
            kmd.bo_array(ctx, loaded.handles[name])[:len(data)] = np.frombuffer(data, np.uint8)
    job = kmd.submit(ctx, loaded.addresses, timeout_ms=10000)
    job.wait(10000)
    assert job.state == COMPLETED
    return {name: kmd.bo_array(ctx, h)[:N * 2].view(F16).copy() for name, h in loaded.handles.items()
            if name not in ("rt", "clamp", "descriptors")}


def _x() -> np.ndarray:
    return np.linspace(-6, 6, N).astype(F16)


def _relu_then_clamp() -> MixedTask:
    """y = relu(x) on SDP; a SHAVE clamp of y into z that waits on the barrier the relu updates."""
    tb = TaskBuilder("fp16")
    relu = tb.sdp(tb.cube("x", (1, 1, N)), tb.cube("y", (1, 1, N)), act="relu")
    sb = _shave()
    produced = sb.barrier()
    _clamp(sb, "y", "z", 0, 2, wait=[produced], update=[])
    mixed = MixedTask(tb, sb)
    mixed.barriers(relu.index, update=[produced])
    return mixed


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_shave_task_waits_on_a_barrier_a_dla_operation_updates(make_kmd: MakeKmd, mode: str) -> None:
    _, kmd = make_kmd(mode=mode)
    out = _run(kmd, _relu_then_clamp(), {"x": _x()})
    np.testing.assert_array_equal(out["y"], np.maximum(_x(), F16(0)))
    np.testing.assert_array_equal(out["z"], np.clip(_x(), F16(0), F16(2)))
    assert kmd.stats()["shave"]["jobs"] == 1


@pytest.mark.parametrize("mode", ["deterministic", "threaded"])
def test_a_dla_operation_waits_on_a_barrier_shave_tasks_update(make_kmd: MakeKmd, mode: str) -> None:
    _, kmd = make_kmd(mode=mode)
    sb = _shave()
    clamped = sb.barrier()
    _clamp(sb, "x", "y", -3, 3, wait=[], update=[clamped])
    tb = TaskBuilder("fp16")
    relu = tb.sdp(tb.cube("y", (1, 1, N)), tb.cube("z", (1, 1, N)), act="relu")
    mixed = MixedTask(tb, sb)
    mixed.barriers(relu.index, wait=[clamped])
    out = _run(kmd, mixed, {"x": _x()})
    np.testing.assert_array_equal(out["z"], np.maximum(np.clip(_x(), F16(-3), F16(3)), F16(0)))


def test_dla_then_shave_then_dla_in_one_task(make_kmd: MakeKmd) -> None:
    """relu (DLA) -> clamp (SHAVE) -> negate-and-relu (DLA), one task, each step started by a barrier."""
    _, kmd = make_kmd()
    tb = TaskBuilder("fp16")
    first = tb.sdp(tb.cube("x", (1, 1, N)), tb.cube("y", (1, 1, N)), act="relu")
    second = tb.sdp(tb.cube("z", (1, 1, N)), tb.cube("w", (1, 1, N)), act="clamp", clip=(0.5, 1.5))
    sb = _shave()
    produced, consumed = sb.barrier(), sb.barrier()
    _clamp(sb, "y", "z", 0, 2, wait=[produced], update=[consumed])
    mixed = MixedTask(tb, sb)
    mixed.barriers(first.index, update=[produced])
    mixed.barriers(second.index, wait=[consumed])
    out = _run(kmd, mixed, {"x": _x()})
    expect = np.clip(np.clip(np.maximum(_x(), F16(0)), F16(0), F16(2)), F16(0.5), F16(1.5))
    np.testing.assert_array_equal(out["w"], expect)


# -- the checks ------------------------------------------------------------------------------------

def _mixed_with(waits: dict[int, list[int]], updates: dict[int, list[int]]) -> tuple[MixedTask, int]:
    tb = TaskBuilder("fp16")
    tb.sdp(tb.cube("x", (1, 1, N)), tb.cube("y", (1, 1, N)), act="relu")
    sb = _shave()
    b = sb.barrier()
    _clamp(sb, "y", "z", 0, 2, wait=[b], update=[])
    sb.barrier()  # b + 3: in the list's barrier_mask, updated by no task
    mixed = MixedTask(tb, sb)
    mixed.barriers(0, wait=waits.get(0, []), update=updates.get(0, []))
    return mixed, b


def _op_barriers(desc: bytearray, mixed_offsets: list[int], wait: int, update: int) -> None:
    at = mixed_offsets[BARRIERS_ENTRY]
    d = T.dla_op_barrier_desc_t.from_buffer(desc, at)
    d.wait_mask, d.update_mask = wait, update


def _refused(kmd: Kmd, mixed: MixedTask, mutate: Callable[[bytearray, list[int]], None]) -> DlaError:
    offsets = [off for _, off in mixed.build().addresses[:BARRIERS_ENTRY + 1]]
    with pytest.raises(DlaError) as e:
        _run(kmd, mixed, {"x": _x()}, lambda desc: mutate(desc, offsets))
    return e.value


def test_an_operation_barrier_outside_the_lists_barrier_mask_is_refused(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    mixed, b = _mixed_with({}, {})
    error = _refused(kmd, mixed, lambda d, o: _op_barriers(d, o, 1 << 20, 1 << b))
    assert error.code == NvError.BadValue
    assert "operation 0 (SDP).wait_mask: 0x100000 names barrier(s) [20] outside the list's barrier_mask" \
        in error.message


def test_a_barrier_an_operation_waits_on_needs_a_producer(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    mixed, b = _mixed_with({}, {})
    error = _refused(kmd, mixed, lambda d, o: _op_barriers(d, o, 1 << (b + 3), 1 << b))
    assert error.code == NvError.BadValue
    assert f"operation 0 (SDP) waits on barrier {b + 3}, which no task updates" in error.message


def test_a_cycle_through_an_operation_and_shave_tasks_is_named(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    mixed, b = _mixed_with({}, {})
    # The operation updates b (the first DMA waits on it) and waits on the kernel's barrier (b + 2),
    # which can fire only after that DMA ran.
    error = _refused(kmd, mixed, lambda d, o: _op_barriers(d, o, 1 << (b + 2), 1 << b))
    assert error.code == NvError.BadValue
    assert "deadlock:" in error.message
    assert f"operation 0 (SDP) waits on barrier {b + 2}" in error.message
    assert "DMA task 0 (to tile 0)" in error.message and "kernel task 0" in error.message


def test_a_task_with_operations_and_a_list_needs_its_operation_barriers(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    mixed, _ = _mixed_with({}, {})

    def no_barriers(desc: bytearray, offsets: list[int]) -> None:
        T.shave_list_desc_t.from_buffer(desc, offsets[LIST_ENTRY]).op_barrier_index = -1

    error = _refused(kmd, mixed, no_barriers)
    assert error.code == NvError.BadValue
    assert "op_barrier_index: -1, but the task has 1 DLA operations beside its list" in error.message


def test_operation_barriers_beyond_their_entry_are_refused(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    mixed, _ = _mixed_with({}, {})

    def elsewhere(desc: bytearray, offsets: list[int]) -> None:
        T.shave_list_desc_t.from_buffer(desc, offsets[LIST_ENTRY]).op_barrier_index = 99

    error = _refused(kmd, mixed, elsewhere)
    assert error.code == NvError.BadParameter
    assert "op_barrier_index" in error.message and "99" in error.message


def test_the_producer_and_consumer_counts_include_the_operations(make_kmd: MakeKmd) -> None:
    """Two DLA operations (each half of the input) update barrier b, the DMA task waits on it: the KMD
    configures b with 2 producers and 1 consumer, and the DMA starts after both halves."""
    from pydla.deviceapi.generated import dla_regs as R

    dev, kmd = make_kmd()
    tb = TaskBuilder("fp16")
    half = N // 2
    ops = [tb.sdp(tb.cube("x", (1, 1, half), offset=k * N), tb.cube("y", (1, 1, half), offset=k * N),
                  act="relu") for k in range(2)]
    sb = _shave()
    b = sb.barrier()
    _clamp(sb, "y", "z", 0, 2, wait=[b], update=[])
    mixed = MixedTask(tb, sb)
    for op in ops:
        mixed.barriers(op.index, update=[b])
    out = _run(kmd, mixed, {"x": _x()})
    np.testing.assert_array_equal(out["z"], np.clip(_x(), F16(0), F16(2)))
    dev.reg_write(R.SHAVE_BAR_SELECT, b)
    assert dev.reg_read(R.SHAVE_BAR_CONFIG) == 2 | 1 << 16
    dev.reg_write(R.SHAVE_BAR_SELECT, b + 1)  # loaded: the DMA produces it, the kernel consumes it
    assert dev.reg_read(R.SHAVE_BAR_CONFIG) == 1 | 1 << 16


def test_a_legacy_shave_list_of_44_bytes_still_runs(make_kmd: MakeKmd) -> None:
    """A list written before op_barrier_index (dla_task 1.8.0) is 44 bytes: it reads as none."""
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    sb = _shave()
    _clamp(sb, "x", "y", -1, 1, wait=[], update=[])
    built = sb.build()
    legacy = ctypes.sizeof(T.shave_list_desc_t) - 4
    assert legacy == 44
    loaded = built.load(kmd, ctx)
    for name, data in (("rt", RT), ("clamp", CLAMP), ("x", _x().tobytes())):
        kmd.bo_array(ctx, loaded.handles[name])[:len(data)] = np.frombuffer(data, np.uint8)
    addresses = list(loaded.addresses)
    # Entry 1 (the list) holds 44 bytes; what follows it reads as garbage if the KMD read further.
    entry = addresses[1]
    addresses[1] = AddressEntry(entry.handle, entry.offset, legacy)
    desc = kmd.bo_array(ctx, entry.handle)
    desc[entry.offset + legacy:entry.offset + legacy + 2] = 0x55
    kmd.submit(ctx, addresses, timeout_ms=10000).wait(10000)
    y = kmd.bo_array(ctx, loaded.handles["y"])[:N * 2].view(F16)
    np.testing.assert_array_equal(y, np.clip(_x(), F16(-1), F16(1)))


def test_a_task_of_operations_and_a_list_is_one_task_in_the_trace(make_kmd: MakeKmd) -> None:
    from pydla.deviceapi.generated import dla_regs as R
    from pydla.deviceapi.generated import trace as TR
    from pydla.deviceapi.trace import read_ring
    from pydla.kmd.trace import KmdTrace

    _, kmd = make_kmd()
    trace = KmdTrace(kmd, size=1 << 16, mask=int(R.trace_class_e.TASK))
    mixed, _ = _mixed_with({}, {0: [0]})
    _run(kmd, mixed, {"x": _x()})
    got = [(e.name, e.record.to_dict()) for e in read_ring(trace.snapshot(), TR.API).events]
    assert [n for n, _ in got] == ["task_start", "task_end"]
    assert got[0][1]["num_ops"] == 4  # the SDP operation, two DMA tasks and a kernel task
    assert got[1][1]["status"] == "OK"


def test_a_failing_operation_fails_the_task_and_resets_the_tiles(make_kmd: MakeKmd) -> None:
    """The DMA waits on the SDP operation, which fails: the job fails with the block's error, the
    list is stopped (the tiles reset), and the next task runs."""
    dev, kmd = make_kmd()
    mixed, _ = _mixed_with({}, {0: [0]})
    dev.inject_error("SDP")
    with pytest.raises(DlaError) as e:
        _run(kmd, mixed, {"x": _x()})
    assert e.value.code == NvError.BadValue
    assert "operation 0 (SDP) failed on the device: BAD_CONFIG" in e.value.message
    assert kmd.stats()["shave"]["resets"] >= 1
    out = _run(kmd, _mixed_with({}, {0: [0]})[0], {"x": _x()})  # the same task again: it runs
    np.testing.assert_array_equal(out["z"], np.clip(_x(), F16(0), F16(2)))


def test_a_failing_shave_task_aborts_the_operations_waiting_for_it(make_kmd: MakeKmd) -> None:
    """The SDP operation waits on the list's DMA out; the kernel reads beyond its tile's CMX (a fault
    at run time): the job fails with the SHAVE error, the held operation is abandoned, and the next
    task runs."""
    _, kmd = make_kmd()
    sb = _shave()
    clamped = sb.barrier()
    _clamp(sb, "x", "y", -3, 3, wait=[], update=[clamped], kernel_reads=0x300000)
    tb = TaskBuilder("fp16")
    relu = tb.sdp(tb.cube("y", (1, 1, N)), tb.cube("z", (1, 1, N)), act="relu")
    mixed = MixedTask(tb, sb)
    mixed.barriers(relu.index, wait=[clamped])
    with pytest.raises(DlaError) as e:
        _run(kmd, mixed, {"x": _x()})
    assert e.value.code == NvError.InvalidAddress
    assert "SHAVE tile 0 stopped with READ_FAULT in kernel task 0 (tile 0, kernel_id 7)" in e.value.message
    assert kmd.stats()["shave"]["errors"] == 1
    out = _run(kmd, _mixed_with({}, {0: [0]})[0], {"x": _x()})
    np.testing.assert_array_equal(out["z"], np.clip(_x(), F16(0), F16(2)))


def test_a_list_of_dma_tasks_only_beside_an_operation(make_kmd: MakeKmd) -> None:
    """A copy through a tile's CMX, started by the operation that writes its source."""
    _, kmd = make_kmd()
    tb = TaskBuilder("fp16")
    relu = tb.sdp(tb.cube("x", (1, 1, N)), tb.cube("y", (1, 1, N)), act="relu")
    sb = _shave()
    produced, loaded = sb.barrier(), sb.barrier()
    sb.dma(sb.ref("y", N * 2), tile=1, cmx_offset=0, to_cmx=True, line_size=N * 2, wait=[produced],
           update=[loaded])
    sb.dma(sb.ref("z", N * 2), tile=1, cmx_offset=0, to_cmx=False, line_size=N * 2, wait=[loaded])
    mixed = MixedTask(tb, sb)
    mixed.barriers(relu.index, update=[produced])
    out = _run(kmd, mixed, {"x": _x()})
    np.testing.assert_array_equal(out["z"], np.maximum(_x(), F16(0)))
