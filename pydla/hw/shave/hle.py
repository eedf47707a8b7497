"""High-level emulation: a shipped kernel, unchanged, runs as its numpy equivalent.

Emulating RV32 machine code costs 40-100x numpy (a scalar C softmax under unicorn), which would
make every network with a softmax or a layer normalization slower than today's host CPU runs. So, in
the ``fast`` emulation mode (the configuration's ``shave.emulation``, the default), an invocation of
a shipped kernel whose ELF is byte for byte the committed one (``pydla/kernels/shipped/<name>.elf``,
entered at its own entry point) is computed with numpy on the tile's memory instead: the runtime
kernel still takes the task from the FIFO, waits for its barriers, calls the entry point and updates
the barriers on the emulator; only the kernel's body is replaced. ``exact`` mode runs every kernel on
the emulator (for kernel and driver developers: faults, budgets and PCs are the machine code's).

The equivalents agree with the emulated kernels within each kernel's documented tolerance
(tests/hw/shave/test_hle.py runs both on the same inputs). An invocation they do not cover (a
pointer outside WIN_F's data or WIN_E, a rank or data type the kernel would refuse, a dynamic
input...) runs on the emulator, so every error the kernel reports is the kernel's own.

Usage::

    plan = find(elf_bytes, entry_offset)          # None: not a shipped kernel (or changed)
    compute = plan(args, memory) if plan else None   # None: not covered, run the machine code
    compute()                                     # once the task's barriers have fired
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pydla.deviceapi.generated import shave as S
from pydla.hw.shave.elfload import parse_elf
from pydla.kernels.build import KERNELS_DIR

_DTYPES: dict[int, np.dtype[Any]] = {int(S.shave_data_type_e.FP32): np.dtype(np.float32),
                                     int(S.shave_data_type_e.FP16): np.dtype(np.float16)}


class NotCovered(Exception):
    """The invocation is outside what the numpy equivalent handles: run the machine code."""


Compute = Callable[[], None]


@dataclass
class Memory:
    """The windows a kernel's pointers may name, as the tile holds them: WIN_E (arguments and RW
    data) and WIN_F up to ``cmx_limit`` (the kernel's data; the stack above is the kernel's own).
    Shapes and strides are read from WIN_E only: it is loaded with the task, so an invocation is
    planned when the task is taken, before the data it reads has been produced."""

    win_e: npt.NDArray[np.uint8]
    cmx: npt.NDArray[np.uint8]
    cmx_limit: int

    def region(self, addr: int) -> tuple[npt.NDArray[np.uint8], int]:
        if S.WIN_F <= addr < S.WIN_F + self.cmx_limit:
            return self.cmx[:self.cmx_limit], addr - S.WIN_F
        if S.WIN_E <= addr < S.WIN_E + S.WIN_E_BYTES:
            return self.win_e, addr - S.WIN_E
        raise NotCovered(f"address {addr:#x}")

    def words(self, addr: int, count: int, dtype: Any, win_e_only: bool = True) -> npt.NDArray[Any]:
        buf, offset = self.region(addr)
        size = count * np.dtype(dtype).itemsize
        if (win_e_only and buf is not self.win_e) or offset + size > len(buf):
            raise NotCovered(f"{size} bytes at {addr:#x}")
        return np.frombuffer(buf, dtype=dtype, count=count, offset=offset)

    def view(self, m: Any) -> npt.NDArray[Any]:
        """The array a static MemRefData describes (dims int32, strides in bits int64)."""
        dtype = _DTYPES.get(int(m.dataType))
        n = int(m.numDims)
        if dtype is None or not 1 <= n <= S.MAX_DIMS or not m.isStatic:
            raise NotCovered("data type, rank or a dynamic shape")
        dims = [int(d) for d in self.words(m.dimsAddr, n, np.int32)]
        bits = [int(b) for b in self.words(m.stridesAddr, n, np.int64)]
        if min(dims) < 0 or any(b % 8 for b in bits):
            raise NotCovered("a negative dimension or a stride that is not whole bytes")
        buf, offset = self.region(int(m.dataAddr))
        try:
            arr: npt.NDArray[Any] = np.ndarray(tuple(dims), dtype=dtype, buffer=buf, offset=offset,
                                               strides=tuple(b // 8 for b in bits))
        except (ValueError, TypeError) as e:  # the strides reach outside the window
            raise NotCovered(str(e)) from None
        return arr

    def output(self, m: Any, shape: tuple[int, ...]) -> tuple[npt.NDArray[Any], Compute]:
        """The output array and what publishes its shape: nothing for a static one (its dims must
        be ``shape``); for a dynamic one (dense), writing its dims and strides where the MemRefData
        points, as the kernels' output_view does."""
        if m.isStatic:
            static = self.view(m)
            if static.shape != shape:
                raise NotCovered("output dims differ from the input's")
            return static, lambda: None
        dtype = _DTYPES.get(int(m.dataType))
        if dtype is None or int(m.numDims) != len(shape):
            raise NotCovered("dynamic output type or rank")
        dims = self.words(m.dimsAddr, len(shape), np.int32, win_e_only=False)
        strides = self.words(m.stridesAddr, len(shape), np.int64, win_e_only=False)
        dense = np.empty(shape, dtype=dtype).strides
        buf, offset = self.region(int(m.dataAddr))
        try:
            out: npt.NDArray[Any] = np.ndarray(shape, dtype=dtype, buffer=buf, offset=offset)
        except (ValueError, TypeError) as e:
            raise NotCovered(str(e)) from None

        def publish() -> None:
            dims.setflags(write=True)
            strides.setflags(write=True)
            dims[:] = shape
            strides[:] = [s * 8 for s in dense]

        return out, publish


def _params(cls: Any, args: bytes) -> Any:
    if len(args) != ctypes.sizeof(cls):
        raise NotCovered("argument size")
    return cls.from_buffer_copy(args)


def _store(out: npt.NDArray[Any], values: npt.NDArray[Any]) -> None:
    with np.errstate(over="ignore"):  # float32 beyond fp16's range rounds to inf, as store_f does
        out[...] = values.astype(out.dtype)


def _axis(axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise NotCovered("axis")
    return a


def clamp(args: bytes, mem: Memory) -> Compute:
    p = _params(S.ClampParams, args)
    x = mem.view(p.input)
    if p.input.dataType != p.output.dataType:
        raise NotCovered("clamp's output type")
    out, publish = mem.output(p.output, x.shape)
    lo, hi = (np.frombuffer(int(v).to_bytes(2, "little"), dtype=np.float16)[0].astype(x.dtype)
              for v in (p.minVal, p.maxVal))

    def compute() -> None:
        publish()
        # The kernel keeps NaN inputs and tests x < lo before x > hi (so lo wins when lo > hi).
        out[...] = np.where(x < lo, lo, np.where(x > hi, hi, x))

    return compute


def _normalised(log: bool) -> Callable[[bytes, Memory], Compute]:
    """softmax, or log_softmax (``log``): SoftmaxParams, computed in float32 from the maximum."""

    def equivalent(args: bytes, mem: Memory) -> Compute:
        p = _params(S.SoftmaxParams, args)
        src = mem.view(p.input)
        axis = _axis(int(p.axis), src.ndim)
        out, publish = mem.output(p.output, src.shape)

        def compute() -> None:
            publish()
            if src.size == 0:
                return
            x = src.astype(np.float32)
            with np.errstate(under="ignore", invalid="ignore", divide="ignore"):
                d = x - x.max(axis=axis, keepdims=True)
                if log:
                    _store(out, d - np.log(np.exp(d).sum(axis=axis, keepdims=True, dtype=np.float32)))
                    return
                e = np.where(d < -87.0, np.float32(0), np.exp(d, dtype=np.float32))  # the kernel's cut
                _store(out, e / e.sum(axis=axis, keepdims=True, dtype=np.float32))

        return compute

    return equivalent


softmax, log_softmax = _normalised(log=False), _normalised(log=True)


def _sigmoid(x: npt.NDArray[np.float32]) -> Any:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _erf32(x: npt.NDArray[np.float32]) -> Any:
    """erf in float32 by the activation kernel's own method: the odd series below 0.5, Abramowitz
    and Stegun 7.1.26 (absolute error below 1.5e-7) up to 4, +-1 above: a few float32 passes over
    the array instead of the float64 series (14x faster on a transformer's Gelu)."""
    a = np.abs(x)
    z = x * x
    near = x * (np.float32(1.12837917) + z * (np.float32(-0.376126389) + z * (np.float32(0.112837917) + z * (
        np.float32(-0.0268661706) + z * (np.float32(0.00522397762) + z * np.float32(-0.000854832702))))))
    t = np.float32(1) / (np.float32(1) + np.float32(0.3275911) * a)
    poly = t * (np.float32(0.254829592) + t * (np.float32(-0.284496736) + t * (np.float32(1.421413741) + t * (
        np.float32(-1.453152027) + t * np.float32(1.061405429)))))
    with np.errstate(under="ignore"):
        far = np.copysign(np.float32(1) - poly * np.exp(-z), x)
    return np.where(a < 0.5, near, np.where(a > 4, np.copysign(np.float32(1), x), far))


def _softplus(x: npt.NDArray[np.float32]) -> Any:
    with np.errstate(over="ignore"):
        return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


ACTIVATIONS: dict[int, Callable[[npt.NDArray[np.float32]], Any]] = {
    int(S.shave_activation_e.EXP): np.exp,
    int(S.shave_activation_e.SIGMOID): _sigmoid,
    int(S.shave_activation_e.TANH): np.tanh,
    int(S.shave_activation_e.ERF): _erf32,
    int(S.shave_activation_e.GELU): lambda x: np.float32(0.5) * x * (np.float32(1)
                                                                     + _erf32(x * np.float32(0.707106781))),
    int(S.shave_activation_e.SQRT): np.sqrt,
    int(S.shave_activation_e.LOG): np.log,
    int(S.shave_activation_e.SOFTPLUS): _softplus,
    int(S.shave_activation_e.MISH): lambda x: x * np.tanh(_softplus(x)),
}


def activation(args: bytes, mem: Memory) -> Compute:
    p = _params(S.ActivationParams, args)
    function = ACTIVATIONS.get(int(p.op))
    if function is None:
        raise NotCovered("op")
    src = mem.view(p.input)
    out, publish = mem.output(p.output, src.shape)

    def compute() -> None:
        publish()
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            y = np.asarray(function(src.astype(np.float32)), dtype=np.float32)
        # Results below 2^-126 flush to zero (keeping their sign), as the kernel's arithmetic does.
        tiny = np.abs(y) < np.finfo(np.float32).tiny
        y[tiny] = np.copysign(np.float32(0), y[tiny])
        _store(out, y)

    return compute


def layernorm(args: bytes, mem: Memory) -> Compute:
    p = _params(S.LayerNormParams, args)
    if p.input.dataType != S.shave_data_type_e.FP32 or p.output.dataType != S.shave_data_type_e.FP32:
        raise NotCovered("layernorm's FP32 only")
    x = mem.view(p.input)
    axis = _axis(int(p.axis), x.ndim)
    group = x.shape[axis:]
    count = int(np.prod(group))
    vectors: list[npt.NDArray[Any] | None] = []
    for v in (p.scale, p.bias):
        arr = None if v.numDims == 0 else mem.view(v)
        if arr is not None and (arr.dtype != np.float32 or arr.size != count):
            raise NotCovered("scale or bias size")
        vectors.append(arr)
    out, publish = mem.output(p.output, x.shape)
    axes = tuple(range(axis, x.ndim))
    eps = np.float32(p.epsilon)

    def compute() -> None:
        publish()
        if x.size == 0:
            return
        mean = x.mean(axis=axes, keepdims=True, dtype=np.float32)
        d = x - mean
        y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True, dtype=np.float32) + eps)
        scale, bias = vectors
        if scale is not None:
            y = y * np.ascontiguousarray(scale).reshape(group)
        if bias is not None:
            y = y + np.ascontiguousarray(bias).reshape(group)
        out[...] = y

    return compute


def _reducer(op: int) -> Callable[[npt.NDArray[np.float32]], Any] | None:
    r = S.shave_reduce_e
    f32 = np.float32

    def lse(x: npt.NDArray[np.float32]) -> Any:
        m = x.max(axis=1)
        finite = np.where(np.isfinite(m), m, f32(0))
        with np.errstate(divide="ignore", invalid="ignore"):
            y = finite + np.log(np.exp(x - finite[:, None, :]).sum(axis=1, dtype=f32))
        return np.where(np.isfinite(m), y, m)

    table: dict[int, Callable[[npt.NDArray[np.float32]], Any]] = {
        int(r.SUM): lambda x: x.sum(axis=1, dtype=f32), int(r.MEAN): lambda x: x.mean(axis=1, dtype=f32),
        int(r.MAX): lambda x: x.max(axis=1), int(r.MIN): lambda x: x.min(axis=1),
        int(r.PROD): lambda x: x.prod(axis=1, dtype=f32),
        int(r.L1): lambda x: np.abs(x).sum(axis=1, dtype=f32),
        int(r.L2): lambda x: np.sqrt((x * x).sum(axis=1, dtype=f32)),
        int(r.SUM_SQUARE): lambda x: (x * x).sum(axis=1, dtype=f32),
        int(r.LOG_SUM): lambda x: np.log(x.sum(axis=1, dtype=f32)), int(r.LOG_SUM_EXP): lse,
    }
    return table.get(op)


def reduce(args: bytes, mem: Memory) -> Compute:
    p = _params(S.ReduceParams, args)
    function = _reducer(int(p.op))
    src = mem.view(p.input)
    out = mem.view(p.output)
    if function is None or src.ndim != 3 or src.shape[1] == 0:
        raise NotCovered("op, rank or an empty reduction")
    a, _, b = src.shape
    if out.shape not in ((a, 1, b), (a, b)):
        raise NotCovered("output dims")
    target = out.reshape(a, b) if out.ndim == 2 else out[:, 0, :]

    def compute() -> None:
        with np.errstate(all="ignore"):
            _store(target, np.asarray(function(src.astype(np.float32)), dtype=np.float32))

    return compute


EQUIVALENTS: dict[str, Callable[[bytes, Memory], Compute]] = {
    "clamp": clamp, "softmax": softmax, "log_softmax": log_softmax, "activation": activation,
    "layernorm": layernorm, "reduce": reduce,
}


@functools.cache
def _shipped() -> dict[bytes, tuple[str, int]]:
    """SHA-256 of each shipped kernel's committed ELF -> (name, entry offset in WIN_D)."""
    table = {}
    for name in EQUIVALENTS:
        path = KERNELS_DIR / f"{name}.elf"
        if path.is_file():
            data = path.read_bytes()
            rw_data = (S.WIN_E + S.ARGS_MAX_BYTES, S.WIN_E_BYTES - S.ARGS_MAX_BYTES, True)
            image = parse_elf(data, name, [(S.WIN_D, S.WIN_D_BYTES, False), rw_data])
            table[hashlib.sha256(data).digest()] = (name, image.entry - S.WIN_D)
    return table


@functools.cache
def _runtime_digest() -> bytes:
    return hashlib.sha256((KERNELS_DIR / "runtime.elf").read_bytes()).digest()


def is_shipped_runtime(elf: bytes) -> bool:
    """Whether ``elf`` is pydla's runtime kernel, byte for byte (its loop may then run in Python:
    pydla.hw.shave.tile_fast)."""
    return hashlib.sha256(elf).digest() == _runtime_digest()


def find(elf: bytes, entry_offset: int) -> Callable[[bytes, Memory], Compute | None] | None:
    """The numpy equivalent of kernel ``elf`` entered at WIN_D + ``entry_offset``, or None when
    ``elf`` is no shipped kernel (or a changed one). Called with the invocation's arguments and the
    tile's memory when the task is taken, it returns the computation to run in the kernel's place
    once the task's barriers have fired, or None when the invocation is not covered (run the
    machine code)."""
    known = _shipped().get(hashlib.sha256(elf).digest())
    if known is None or known[1] != entry_offset:
        return None
    function = EQUIVALENTS[known[0]]

    def plan(args: bytes, mem: Memory) -> Compute | None:
        try:
            return function(args, mem)
        except NotCovered:
            return None

    return plan
