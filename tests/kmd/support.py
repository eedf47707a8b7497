"""Shared helpers of the KMD tests: task cases with numpy references, descriptor patching, driving a
step-mode device, and replaying a register trace to check the scheduler's order.

A :class:`Case` is a built task plus what it needs to be checked: the shapes of its float32 inputs
(filled with random numbers per run), fixed inputs, its outputs and a numpy reference computing
them. ``feed`` fills the outputs with NaN first, so a stale result from an earlier run never passes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from pydla.deviceapi.generated import dla_regs as R
from pydla.deviceapi.generated import dla_task as T
from pydla.deviceapi.generated.device_api import dla_block_e
from pydla.firmware.engine import TaskRun
from pydla.firmware.graph import OP_DESC, OP_DESC_SIZE, SURFACE_DESC, SURFACE_DESC_SIZE
from pydla.firmware.program import STATUS
from pydla.hw.device import RegAccess, VirtualDevice
from pydla.kmd.driver import Job, Kmd
from pydla.loadable.taskbuilder import BuiltTask, Cube, LoadedTask, TaskBuilder
from pydla.target.config import DeviceConfig, load_config

Array = npt.NDArray[np.float32]
MakeKmd = Callable[..., tuple[VirtualDevice, Kmd]]  # the make_kmd fixture (conftest.py)
F32 = 4
RTOL = ATOL = 1e-4
COMMON_SIZE = ctypes.sizeof(T.dla_common_op_desc_t)
COMPLETED = int(T.dla_event_e.OP_COMPLETED)
PROGRAMMED = int(T.dla_event_e.OP_PROGRAMMED)
ENABLED = int(T.dla_event_e.OP_ENABLED)

# Why a test runs headless only (pytest.mark.headless_only, see tests/kmd/conftest.py).
ENGINE_INTERNALS = ("inspects the engine's TaskRun (its enable order, its gating) and the host's register "
                    "trace; headed runs the same engine on the microcontroller, out of the host's sight")
HOST_COPY = ("the host KMD's copy of the descriptors runs headless; headed, the firmware reads and validates "
             "its own copy when the task starts")
HOST_PROGRAMS = "the host's graph holds the register programs only when the host programs the blocks"


# -- numpy references ------------------------------------------------------------------------------


def ref_conv(x: Array, w: Array, pads: tuple[int, int, int, int] = (0, 0, 0, 0)) -> Array:
    """A direct convolution, stride 1, no dilation, one group; pads = top, left, bottom, right."""
    xp = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    cols = sliding_window_view(xp, w.shape[2:], axis=(1, 2))  # C, Ho, Wo, kh, kw
    out: Array = np.einsum("chwij,kcij->khw", cols, w, dtype=np.float64).astype(np.float32)
    return out


def ref_maxpool(x: Array, k: int, s: int, pad: int = 0) -> Array:
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    win = sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::s, ::s]
    return np.asarray(win.max(axis=(3, 4)), dtype=np.float32)


def ref_lrn(x: Array, size: int, alpha: float, beta: float, bias: float) -> Array:
    """ONNX LRN across channels."""
    c = x.shape[0]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = x.astype(np.float64) ** 2
    acc = np.stack([sq[max(0, i - lo):min(c, i + hi + 1)].sum(axis=0) for i in range(c)])
    out: Array = (x / (bias + alpha / size * acc) ** beta).astype(np.float32)
    return out


def relu(x: Array) -> Array:
    return np.maximum(x, 0).astype(np.float32)


# -- cases -----------------------------------------------------------------------------------------


@dataclass
class Case:
    """A built task, its inputs and outputs (buffer name -> float32 shape), and its reference."""

    built: BuiltTask
    inputs: dict[str, tuple[int, ...]]
    outputs: dict[str, tuple[int, ...]]
    reference: Callable[[dict[str, Array]], dict[str, Array]]
    fixed: dict[str, Array] = field(default_factory=dict)

    def load(self, kmd: Kmd, ctx: int) -> LoadedTask:
        return self.built.load(kmd, ctx)

    def feed(self, kmd: Kmd, ctx: int, loaded: LoadedTask, seed: int) -> dict[str, Array]:
        """Fill the outputs with NaN, write fresh inputs; return the expected outputs."""
        for name, shape in self.outputs.items():
            _f32(kmd, ctx, loaded, name, shape)[...] = np.nan
        rng = np.random.default_rng(seed)
        values = dict(self.fixed)
        for name, shape in self.inputs.items():
            values[name] = rng.standard_normal(shape).astype(np.float32)
        for name, value in values.items():
            _f32(kmd, ctx, loaded, name, value.shape)[...] = value
        return self.reference(values)

    def result(self, kmd: Kmd, ctx: int, loaded: LoadedTask) -> dict[str, Array]:
        return {name: _f32(kmd, ctx, loaded, name, shape).copy() for name, shape in self.outputs.items()}

    def check(self, kmd: Kmd, ctx: int, loaded: LoadedTask, expected: dict[str, Array]) -> None:
        got = self.result(kmd, ctx, loaded)
        for name, want in expected.items():
            np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"output buffer '{name}'")


def _f32(kmd: Kmd, ctx: int, loaded: LoadedTask, name: str, shape: tuple[int, ...]) -> Array:
    n = int(np.prod(shape))
    raw = kmd.bo_array(ctx, loaded.handles[name])[:n * F32]
    return raw.view(np.float32).reshape(shape)


def conv_sdp_pdp() -> Case:
    """Operations 0 CONV (3x3, pad 1), 1 SDP (flying: bias, relu), 2 PDP (max 2x2 / 2)."""
    tb = TaskBuilder()
    x = tb.cube("x", (3, 8, 8))
    y = tb.cube("y", (4, 8, 8))
    z = tb.cube("z", (4, 4, 4))
    conv = tb.conv(x, tb.weights("w", (4, 3, 3, 3)), weight_shape=(4, 3, 3, 3), pads=(1, 1, 1, 1))
    tb.sdp(conv, y, bias=tb.weights("b", (4,)), act="relu")
    tb.pdp(y, z, kernel=(2, 2), stride=(2, 2))

    def reference(v: dict[str, Array]) -> dict[str, Array]:
        yy = relu(ref_conv(v["x"], v["w"], (1, 1, 1, 1)) + v["b"][:, None, None])
        return {"y": yy, "z": ref_maxpool(yy, 2, 2)}

    return Case(tb.build(), {"x": (3, 8, 8), "w": (4, 3, 3, 3), "b": (4,)},
                {"y": (4, 8, 8), "z": (4, 4, 4)}, reference)


def pdp_chain(n: int = 3, channels: int = 2) -> Case:
    """``n`` max-pools 2x2 / 2 in a row: p0 -> p1 -> ... -> pn (operations 0..n-1, all PDP)."""
    tb = TaskBuilder()
    size = 2 ** n
    cubes = [tb.cube(f"p{i}", (channels, size >> i, size >> i)) for i in range(n + 1)]
    for a, b in itertools.pairwise(cubes):
        tb.pdp(a, b, kernel=(2, 2), stride=(2, 2))

    def reference(v: dict[str, Array]) -> dict[str, Array]:
        out, x = {}, v["p0"]
        for i in range(1, n + 1):
            x = ref_maxpool(x, 2, 2)
            out[f"p{i}"] = x
        return out

    return Case(tb.build(), {"p0": cubes[0].shape},
                {f"p{i}": c.shape for i, c in enumerate(cubes) if i}, reference)


def single_pdp(c: int = 2, h: int = 4) -> Case:
    """One PDP operation: max 2x2 / 2 of x (c, h, h) into y."""
    tb = TaskBuilder()
    x = tb.cube("x", (c, h, h))
    y = tb.cube("y", (c, h // 2, h // 2))
    tb.pdp(x, y, kernel=(2, 2), stride=(2, 2))
    return Case(tb.build(), {"x": x.shape}, {"y": y.shape}, lambda v: {"y": ref_maxpool(v["x"], 2, 2)})


def pdp_and_sdp() -> Case:
    """Two independent operations: 0 PDP (x -> y), 1 SDP from memory with relu (u -> v)."""
    tb = TaskBuilder()
    x, y = tb.cube("x", (2, 4, 4)), tb.cube("y", (2, 2, 2))
    u, v = tb.cube("u", (2, 4, 4)), tb.cube("v", (2, 4, 4))
    tb.pdp(x, y, kernel=(2, 2), stride=(2, 2))
    tb.sdp(u, v, act="relu")
    return Case(tb.build(), {"x": x.shape, "u": u.shape}, {"y": y.shape, "v": v.shape},
                lambda d: {"y": ref_maxpool(d["x"], 2, 2), "v": relu(d["u"])})


def two_conv_pairs() -> Case:
    """0 CONV + 1 SDP (bias, relu) -> 2 CONV + 3 SDP (relu) -> 4 PDP (max 2x2 / 2)."""
    tb = TaskBuilder()
    x = tb.cube("x", (3, 8, 8))
    y1, y2, z = tb.cube("y1", (4, 8, 8)), tb.cube("y2", (6, 8, 8)), tb.cube("z", (6, 4, 4))
    c1 = tb.conv(x, tb.weights("w1", (4, 3, 3, 3)), weight_shape=(4, 3, 3, 3), pads=(1, 1, 1, 1))
    tb.sdp(c1, y1, bias=tb.weights("b1", (4,)), act="relu")
    c2 = tb.conv(y1, tb.weights("w2", (6, 4, 3, 3)), weight_shape=(6, 4, 3, 3), pads=(1, 1, 1, 1))
    tb.sdp(c2, y2, act="relu")
    tb.pdp(y2, z, kernel=(2, 2), stride=(2, 2))

    def reference(v: dict[str, Array]) -> dict[str, Array]:
        a = relu(ref_conv(v["x"], v["w1"], (1, 1, 1, 1)) + v["b1"][:, None, None])
        b = relu(ref_conv(a, v["w2"], (1, 1, 1, 1)))
        return {"y1": a, "y2": b, "z": ref_maxpool(b, 2, 2)}

    return Case(tb.build(), {"x": (3, 8, 8), "w1": (4, 3, 3, 3), "b1": (4,), "w2": (6, 4, 3, 3)},
                {"y1": (4, 8, 8), "y2": (6, 8, 8), "z": (6, 4, 4)}, reference)


LRN_SIZE, LRN_ALPHA, LRN_BETA, LRN_BIAS = 3, 0.5, 0.75, 1.0


def _cdp(tb: TaskBuilder, src: Cube, dst: Cube) -> None:
    tb.cdp(src, dst, size=LRN_SIZE, alpha=LRN_ALPHA, beta=LRN_BETA, bias=LRN_BIAS)


def _lrn(x: Array) -> Array:
    return ref_lrn(x, LRN_SIZE, LRN_ALPHA, LRN_BETA, LRN_BIAS)


def diamond() -> Case:
    """a: 0 BDMA copy x -> x1; b: 1 PDP max 3x3 / 1 pad 1 of x1 -> p; c: 2 CDP LRN of x1 -> q;
    d: 3 SDP p + q (element-wise add) -> out."""
    shape = (3, 6, 6)
    nbytes = int(np.prod(shape)) * F32
    tb = TaskBuilder()
    x, x1 = tb.cube("x", shape), tb.cube("x1", shape)
    p, q, out = tb.cube("p", shape), tb.cube("q", shape), tb.cube("out", shape)
    tb.bdma(x.ref, x1.ref, line_size=nbytes)
    tb.pdp(x1, p, kernel=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1))
    _cdp(tb, x1, q)
    tb.sdp(p, out, ew=q, ew_op="add")

    def reference(v: dict[str, Array]) -> dict[str, Array]:
        pp = ref_maxpool(v["x"], 3, 1, pad=1)
        qq = _lrn(v["x"])
        return {"x1": v["x"], "p": pp, "q": qq, "out": pp + qq}

    return Case(tb.build(), {"x": shape}, {"x1": shape, "p": shape, "q": shape, "out": shape}, reference)


def fan_out() -> Case:
    """0 BDMA copy x -> x1, then four consumers of x1 on four blocks: 1 PDP max 2x2 / 2 -> p,
    2 CDP LRN -> q, 3 RUBIK transpose (C, W, H) -> t, 4 SDP relu -> r."""
    shape = (2, 4, 6)
    nbytes = int(np.prod(shape)) * F32
    tb = TaskBuilder()
    x, x1 = tb.cube("x", shape), tb.cube("x1", shape)
    p, q = tb.cube("p", (2, 2, 3)), tb.cube("q", shape)
    t, r = tb.cube("t", (2, 6, 4)), tb.cube("r", shape)
    tb.bdma(x.ref, x1.ref, line_size=nbytes)
    tb.pdp(x1, p, kernel=(2, 2), stride=(2, 2))
    _cdp(tb, x1, q)
    tb.rubik(x1, t, mode="transpose", perm=(0, 2, 1))
    tb.sdp(x1, r, act="relu")

    def reference(v: dict[str, Array]) -> dict[str, Array]:
        a = v["x"]
        return {"x1": a, "p": ref_maxpool(a, 2, 2), "q": _lrn(a),
                "t": np.ascontiguousarray(a.transpose(0, 2, 1)), "r": relu(a)}

    return Case(tb.build(), {"x": shape}, {"x1": shape, "p": (2, 2, 3), "q": shape, "t": (2, 6, 4),
                                           "r": shape}, reference)


def fan_in() -> Case:
    """Three producers on three blocks write channel slices of one cube, one consumer reads it all:
    0 BDMA copy x -> cat[0:2], 1 SDP relu x -> cat[2:4], 2 CDP LRN x -> cat[4:6], 3 PDP max 2x2 / 2
    of cat -> out."""
    c, h, w = 2, 4, 4
    plane = c * h * w * F32
    tb = TaskBuilder()
    x = tb.cube("x", (c, h, w))
    cat = tb.cube("cat", (3 * c, h, w))
    parts = [tb.cube("cat", (c, h, w), offset=i * plane) for i in range(3)]
    out = tb.cube("out", (3 * c, h // 2, w // 2))
    tb.bdma(x.ref, parts[0].ref, line_size=plane)
    tb.sdp(x, parts[1], act="relu")
    _cdp(tb, x, parts[2])
    tb.pdp(cat, out, kernel=(2, 2), stride=(2, 2))

    def reference(v: dict[str, Array]) -> dict[str, Array]:
        a = v["x"]
        full = np.concatenate([a, relu(a), _lrn(a)])
        return {"cat": full, "out": ref_maxpool(full, 2, 2)}

    return Case(tb.build(), {"x": (c, h, w)}, {"cat": (3 * c, h, w), "out": (3 * c, h // 2, w // 2)},
                reference)


def copy_add_chain(pairs: int, n: int = 16) -> Case:
    """2 * ``pairs`` operations alternating BDMA and SDP: BDMA copies a -> b, SDP writes b + 1 -> a.
    Each depends on the one before; a ends as its input + ``pairs``."""
    tb = TaskBuilder()
    a, b = tb.cube("a", (1, 1, n)), tb.cube("b", (1, 1, n))
    one = tb.ref("one", F32)
    for _ in range(pairs):
        tb.bdma(a.ref, b.ref, line_size=n * F32)
        tb.sdp(b, a, ew=one, ew_op="add", ew_mode="scalar")
    return Case(tb.build(), {"a": (1, 1, n)}, {"a": (1, 1, n)},
                lambda v: {"a": v["a"] + np.float32(pairs)}, fixed={"one": np.ones(1, np.float32)})


# -- descriptors ---------------------------------------------------------------------------------------


class Descriptors:
    """Live ctypes views of a task's descriptors, in a writable buffer laid out as BuiltTask's
    (entry k of the address list is ("descriptors", offset_k) for k < 4)."""

    def __init__(self, built: BuiltTask, buf: Any) -> None:
        self.built = built
        self.buf = buf
        self.offsets = [off for _, off in built.addresses[:4]]

    @classmethod
    def of(cls, built: BuiltTask) -> Descriptors:
        """A copy of ``built.descriptors`` to patch; ``commit`` writes it back before ``load``."""
        return cls(built, bytearray(built.descriptors))

    @classmethod
    def loaded(cls, built: BuiltTask, kmd: Kmd, ctx: int, loaded: LoadedTask) -> Descriptors:
        """The descriptors buffer object itself (patching after ``load``)."""
        return cls(built, kmd.bo_array(ctx, loaded.handles["descriptors"]))

    def commit(self) -> BuiltTask:
        self.built.descriptors = bytes(self.buf)
        return self.built

    def network(self) -> Any:
        return T.dla_network_desc_t.from_buffer(self.buf, self.offsets[0])

    def common(self, i: int) -> Any:
        return T.dla_common_op_desc_t.from_buffer(self.buf, self.offsets[1] + i * COMMON_SIZE)

    def block(self, i: int) -> dla_block_e:
        return self.built.operations[i].block

    def op(self, i: int) -> Any:
        return OP_DESC[self.block(i)].from_buffer(self.buf, self.offsets[2] + i * OP_DESC_SIZE)

    def surface(self, i: int) -> Any:
        return SURFACE_DESC[self.block(i)].from_buffer(self.buf, self.offsets[3] + i * SURFACE_DESC_SIZE)


# -- driving -------------------------------------------------------------------------------------------


def drive(kmd: Kmd, dev: VirtualDevice, jobs: Iterable[Job], max_steps: int = 100_000) -> None:
    """Step mode: poll and step until every job is done; fail (fast) when nothing can run."""
    jobs = list(jobs)
    idle = 0
    for _ in range(max_steps):
        kmd.poll()
        if all(j.done for j in jobs):
            return
        if dev.step():
            idle = 0
            continue
        idle += 1
        if idle > 2:
            raise AssertionError(f"step mode: nothing runnable while {[j for j in jobs if not j.done]} "
                                 f"are not done; {block_groups(dev)}; device log: {list(dev.log)[-3:]}")
    raise AssertionError(f"jobs not done after {max_steps} steps")


def block_groups(dev: VirtualDevice) -> str:
    """Each block's group states and the group it runs next, read from its status registers."""
    names = {int(v): k for k, v in R.group_state_e.__members__.items()}
    parts = []
    for b in dev.config.blocks:
        status = dev.reg_read(STATUS[b])
        pointer = dev.reg_read(STATUS[b] + 4)
        parts.append(f"{b.name} g0 {names[status & 3]}, g1 {names[status >> 16 & 3]}, "
                     f"runs g{pointer >> 16 & 1} next")
    return "; ".join(parts)


def wait_all(jobs: Iterable[Job], timeout_ms: int = 5000) -> None:
    deadline = time.monotonic() + timeout_ms / 1000
    for job in jobs:
        job.wait(max(1.0, (deadline - time.monotonic()) * 1000))


# -- the register trace -----------------------------------------------------------------------------


@dataclass
class Replay:
    """Trace positions of each operation's programming, enabling and completion (as the ISR saw it)."""

    programmed: dict[int, int] = field(default_factory=dict)
    enabled: dict[int, int] = field(default_factory=dict)
    completed: dict[int, int] = field(default_factory=dict)
    enable_sequence: list[int] = field(default_factory=list)


def replay(trace: list[RegAccess], run: TaskRun) -> Replay:
    """Map the register accesses of one run back to its operations.

    Programming an operation writes <BLOCK>_D_CTX_ID into its group (operations are programmed in
    chain order); enabling writes <BLOCK>_D_OP_ENABLE = 1 there; the ISR reading GLB_INTR_STATUS
    with the group's done bit is the completion the driver learns of."""
    graph = run.graph
    pos = dict.fromkeys(dla_block_e, 0)
    programmed: dict[tuple[dla_block_e, int], int] = {}
    running: dict[tuple[dla_block_e, int], int] = {}
    out = Replay()
    for t, a in enumerate(trace):
        block_name = a.name.split("_", 1)[0]
        if a.op == "W" and a.name.endswith("_D_CTX_ID"):
            b = dla_block_e[block_name]
            assert a.group is not None
            op = graph.chains[b][pos[b]]
            pos[b] += 1
            programmed[(b, a.group)] = op
            out.programmed[op] = t
        elif a.op == "W" and a.name.endswith("_D_OP_ENABLE") and a.value & 1:
            b = dla_block_e[block_name]
            assert a.group is not None
            op = programmed[(b, a.group)]
            running[(b, a.group)] = op
            out.enabled[op] = t
            out.enable_sequence.append(op)
        elif a.op == "R" and a.address == R.GLB_INTR_STATUS:
            for b in dla_block_e:
                for g in (0, 1):
                    if a.value >> (2 * int(b) + g) & 1:
                        out.completed[running.pop((b, g))] = t
    return out


def check_dependency_order(trace: list[RegAccess], run: TaskRun) -> Replay:
    """Every operation was programmed, enabled once and completed; the engine's enable_order is the
    order of the enable writes; and no operation was enabled before each event it waits for."""
    rp = replay(trace, run)
    ops = run.graph.operations
    n = len(ops)
    assert rp.enable_sequence == run.enable_order
    assert sorted(run.enable_order) == list(range(n)), "each operation enabled exactly once"
    assert sorted(rp.completed) == list(range(n)), "each operation completed"
    when = {PROGRAMMED: rp.programmed, ENABLED: rp.enabled, COMPLETED: rp.completed}
    for op in ops:
        assert rp.programmed[op.index] < rp.enabled[op.index], f"{op.name} enabled before programmed"
        for c in op.consumers:
            event = T.dla_event_e(c.event).name
            assert when[c.event][op.index] < rp.enabled[c.index], (
                f"operation {c.index} was enabled before {op.name} signalled {event}")
        if op.fused_parent != -1:
            assert rp.completed[op.fused_parent] == rp.completed[op.index], "a fused pair completes together"
    return rp


def per_operation(config: str | DeviceConfig = "full") -> DeviceConfig:
    """``config`` without its command processor: the per-operation path (the reference), for the
    tests that inspect its register traffic or the engine's enable order."""
    return dataclasses.replace(load_config(config), command_processor=False)


def per_operation_kmd(make_kmd: MakeKmd) -> MakeKmd:
    """``make_kmd`` whose devices have no command processor (see :func:`per_operation`)."""
    def make(config: str | DeviceConfig = "full", mode: str = "deterministic",
             **kwargs: object) -> tuple[VirtualDevice, Kmd]:
        return make_kmd(per_operation(config), mode, **kwargs)
    return make
