"""The KMD's static checks of a SHAVE task list: one case per rule, each breaking one field of a valid
list (the seed scenario) and expecting the NvError code and a message naming the field and the value.
Nothing reaches the device: the list is refused at submit (and at prepare)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.kmd.driver import Kmd
from pydla.target.config import load_config
from tests.hw.shave.host import RET, tiny_elf
from tests.kmd.shave_lists import F16, ListBuilder, clamp_args, seed_list
from tests.kmd.support import MakeKmd

CMX = 2 << 20  # the "full" configuration's cmx_bytes
STACK = 16384
X = np.linspace(-4, 4, 128).astype(F16)  # 256 bytes
Fix = Callable[[Any, Any, list[Any], list[Any]], None]


def _set(path: str, value: Any) -> Fix:
    """A mutation setting ``path`` (net.x, lst.x, acts[i].x.y, dmas[i].x) to ``value``."""
    def fix(net: Any, lst: Any, acts: list[Any], dmas: list[Any]) -> None:
        scope = {"net": net, "lst": lst, "acts": acts, "dmas": dmas}
        head, _, attr = path.rpartition(".")
        obj = eval(head, {}, scope)  # a test's own constant paths
        if "[" in attr:
            name, index = attr[:-1].split("[")
            getattr(obj, name)[int(index)] = value
        else:
            setattr(obj, attr, value)
    return fix


def _or(path: str, bits: int) -> Fix:
    def fix(net: Any, lst: Any, acts: list[Any], dmas: list[Any]) -> None:
        obj = eval(path.rpartition(".")[0], {}, {"net": net, "lst": lst, "acts": acts, "dmas": dmas})
        attr = path.rpartition(".")[2]
        setattr(obj, attr, getattr(obj, attr) | bits)
    return fix


def _both(*fixes: Fix) -> Fix:
    def fix(*args: Any) -> None:
        for f in fixes:
            f(*args)
    return fix


# (rule, mutation, NvError, substrings the message names). Entries of the seed list: 0 network,
# 1 list, 2 kernel tasks, 3 DMA tasks, 4 input, 5 output, 6 clamp's ELF, 7 arguments, 8 data, 9 runtime.
BV, IS, BP, CM = NvError.BadValue, NvError.InvalidSize, NvError.BadParameter, NvError.CountMismatch
CASES: list[tuple[str, Fix, NvError, list[str]]] = [
    # With operations the task is DLA work beside the list: its DLA descriptors are read first.
    ("operations", _set("net.num_operations", 1), BV, ["op_desc_size 0"]),
    ("op_barriers_alone", _set("lst.op_barrier_index", 7), BV, ["op_barrier_index", "7", "none (-1)"]),
    ("luts", _set("net.num_luts", 2), BV, ["num_luts = 2"]),
    ("num_addresses", _set("net.num_addresses", 3), CM, ["num_addresses = 3"]),
    ("list_index", _set("net.shave_list_index", 99), BP, ["shave_list_index", "index 99"]),
    ("no_tasks", _both(_set("lst.num_act_tasks", 0), _set("lst.num_dma_tasks", 0)), BV,
     ["num_act_tasks, num_dma_tasks", "no tasks"]),
    ("act_array", _set("lst.num_act_tasks", 100), IS,
     ["kernel tasks (act_task_index)", "100 descriptors"]),
    ("dma_count", _set("lst.num_dma_tasks", 65), BV, ["num_dma_tasks", "65", "64"]),
    ("runtime_bounds", _set("lst.runtime.offset", 1 << 20), IS, ["runtime", "offset 1048576"]),
    ("runtime_entry", _set("lst.runtime.address", 42), BP, ["runtime.address", "index 42"]),
    ("kernel_bounds", _set("acts[0].kernel.size", 1 << 24), IS,
     ["kernel task 0: kernel", "size 16777216"]),
    ("args_size", _set("acts[0].args.size", S.ARGS_MAX_BYTES + 4), IS,
     ["kernel task 0: args.size", str(S.ARGS_MAX_BYTES + 4)]),
    ("data_bounds", _set("acts[0].data.offset", 4096), IS, ["kernel task 0: data", "offset 4096"]),
    ("entry_offset", _set("acts[0].entry_offset", S.WIN_D_BYTES), BV,
     ["kernel task 0.entry_offset", hex(S.WIN_D_BYTES)]),
    ("data_offset_low", _set("acts[0].data_offset", 16), BV, ["kernel task 0.data_offset", "0x10"]),
    ("data_offset_high", _set("acts[0].data_offset", S.WIN_E_BYTES - 8), BV,
     ["kernel task 0.data_offset", hex(S.WIN_E_BYTES - 8)]),
    ("act_tile", _set("acts[0].tile", 2), BV, ["kernel task 0.tile", "2 is not one of", "0..1"]),
    ("dma_tile", _set("dmas[0].tile", 3), BV, ["DMA task 0.tile", "3"]),
    ("stack_align", _set("lst.stack_size[0]", 1000), BV, ["stack_size[0]", "1000", "multiple of 16"]),
    ("stack_small", _set("lst.stack_size[0]", 128), BV, ["stack_size[0]", "128"]),
    ("stack_large", _set("lst.stack_size[0]", CMX // 2 + 16), BV,
     ["stack_size[0]", str(CMX // 2 + 16)]),
    ("stack_unused", _set("lst.stack_size[1]", 4096), BV, ["stack_size[1]", "4096", "tile 1"]),
    ("dma_ddr_extent", _set("dmas[0].line_size", 512), IS, ["DMA task 0: ddr.size", "512"]),
    ("dma_ddr_bounds", _set("dmas[1].ddr.offset", 100), IS, ["DMA task 1: ddr", "offset 100"]),
    ("dma_cmx", _set("dmas[0].cmx_offset", CMX - 16), IS,
     ["DMA task 0.cmx_offset", hex(CMX - 16), "tile 0"]),
    ("dma_into_stack", _set("dmas[1].cmx_offset", CMX - STACK - 4096 - 128), IS,
     ["DMA task 1.cmx_offset", "below its stack"]),
    ("dma_direction", _set("dmas[0].direction", 2), BV, ["DMA task 0.direction", "2"]),
    ("dma_shape", _set("dmas[0].line_repeat", 0), BV, ["DMA task 0", "line_repeat", "(1, 0, 256)"]),
    ("mask_outside", _or("acts[0].wait_mask", 1 << 5), BV,
     ["kernel task 0.wait_mask", "0x21", "[5]", "barrier_mask 0x7"]),
    ("no_producer", _both(_or("lst.barrier_mask", 1 << 5), _or("dmas[1].wait_mask", 1 << 5)), BV,
     ["DMA task 1 (from tile 0) waits on barrier 5, which no task updates"]),
    ("notify_empty", _set("lst.notify_mask", 0), BV, ["notify_mask is 0"]),
    ("notify_outside", _or("lst.notify_mask", 1 << 9), BV, ["notify_mask 0x204", "[9]"]),
    ("notify_waited", _set("lst.notify_mask", 1 << 1), BV,
     ["notify barrier 1", "waited on by DMA task 1"]),
    ("notify_unproduced", _both(_or("lst.barrier_mask", 1 << 6), _or("lst.notify_mask", 1 << 6)),
     BV, ["notify barrier 6", "updated by no task"]),
    ("deadlock", _set("dmas[0].wait_mask", 1 << 1), BV,
     ["deadlock", "waits on barrier", "updates barrier 1", "waited on by DMA task 0"]),
]


@pytest.mark.parametrize("rule,fix,code,names", CASES, ids=[c[0] for c in CASES])
def test_each_rule(make_kmd: MakeKmd, rule: str, fix: Fix, code: NvError, names: list[str]) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    lb, _, good = seed_list(kmd, ctx, X, 0, 1)
    kmd.submit(ctx, good, timeout_ms=5000).wait(5000)  # the list as built is valid
    jobs = kmd.stats()["shave"]["jobs"]
    addresses = lb.addresses(notify=[2], stack=STACK, mutate=fix)
    with pytest.raises(DlaError) as e:
        kmd.submit(ctx, addresses, timeout_ms=5000)
    assert e.value.code == code, e.value
    assert e.value.message.startswith("task "), e.value.message
    for name in names:
        assert name in e.value.message, (name, e.value.message)
    with pytest.raises(DlaError) as again:  # at prepare too
        kmd.prepare(ctx, addresses)
    assert again.value.code == code
    assert kmd.stats()["shave"]["jobs"] == jobs  # nothing reached the device


def test_a_device_without_shave_tiles_refuses_a_list(make_kmd: MakeKmd) -> None:
    _, full = make_kmd()
    ctx = full.open_context()
    _, _, addresses = seed_list(full, ctx, X, 0, 1)
    raw = [bytes(full.bo_array(ctx, e.handle)) for e in addresses]
    _, kmd = make_kmd("small")
    small_ctx = kmd.open_context()
    moved = _copy(kmd, small_ctx, raw, addresses)
    with pytest.raises(DlaError) as e:
        kmd.submit(small_ctx, moved)
    assert e.value.code == NvError.NotSupported
    assert "shave_list_index = 1" in e.value.message and "'small' has no SHAVE tiles" in e.value.message


def _copy(kmd: Kmd, ctx: int, raw: list[bytes], addresses: list[Any]) -> list[Any]:
    out = []
    for data, e in zip(raw, addresses, strict=True):
        h = kmd.bo_create(ctx, len(data))
        kmd.bo_array(ctx, h)[:] = np.frombuffer(data, np.uint8)
        out.append(dataclasses.replace(e, handle=h))
    return out


def test_barriers_beyond_the_device_are_refused(make_kmd: MakeKmd) -> None:
    cfg = load_config("full")
    assert cfg.shave is not None
    _, kmd = make_kmd(dataclasses.replace(cfg, shave=dataclasses.replace(cfg.shave, barriers=8)))
    ctx = kmd.open_context()
    lb = ListBuilder(kmd, ctx)
    lb.act(0, "noop", b"", image=tiny_elf([RET]), update=[9])
    with pytest.raises(DlaError) as e:
        kmd.submit(ctx, lb.addresses(notify=[9]))
    assert e.value.code == NvError.BadValue
    assert "barrier_mask: 0x200 names barriers beyond the device's 8" in e.value.message


def test_a_fifo_holds_sixty_four_tasks(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    lb = ListBuilder(kmd, ctx)
    for i in range(65):
        lb.act(0, "noop", b"", image=tiny_elf([RET]), update=[0] if i == 64 else [])
    with pytest.raises(DlaError) as e:
        kmd.submit(ctx, lb.addresses(notify=[0]))
    assert e.value.code == NvError.BadValue
    assert "65 tasks go to the FIFO of tile 0, which holds 64" in e.value.message
    lb.acts.pop(0)  # 64 run
    kmd.submit(ctx, lb.addresses(notify=[0]), timeout_ms=5000).wait(5000)


def test_every_task_ends_before_the_list(make_kmd: MakeKmd) -> None:
    """A task no notify barrier follows could still run when the list is reported done."""
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    lb = ListBuilder(kmd, ctx)
    x = lb.put(X)
    lb.dma(x, tile=0, cmx_offset=0, size=X.nbytes, to_cmx=True, update=[0])
    lb.act(0, "clamp", clamp_args(0, 0x1000, X.shape, F16, 0, 1), wait=[0], update=[1])
    lb.dma(x, tile=1, cmx_offset=0, size=X.nbytes, to_cmx=True)  # on its own
    with pytest.raises(DlaError) as e:
        kmd.submit(ctx, lb.addresses(notify=[1]))
    assert e.value.code == NvError.BadValue
    assert "DMA task 1 (to tile 1) comes before no notify barrier" in e.value.message


def test_a_descriptor_changed_after_a_valid_submit_is_checked_again(make_kmd: MakeKmd) -> None:
    _, kmd = make_kmd()
    ctx = kmd.open_context()
    lb, _, addresses = seed_list(kmd, ctx, X, 0, 1)
    kmd.submit(ctx, addresses, timeout_ms=5000).wait(5000)
    dmas = lb.array(3)
    desc = dmas[:60].view(np.uint32)
    desc[5] = CMX  # DMA task 0's cmx_offset (after ddr (12 bytes), direction and tile)
    with pytest.raises(DlaError) as e:
        kmd.submit(ctx, addresses)
    assert e.value.code == NvError.InvalidSize and "DMA task 0.cmx_offset" in e.value.message
