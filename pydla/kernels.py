"""Custom SHAVE kernels: a kernel author's C kernel run on tensors through the whole stack.

A kernel is C built with ``pydla kernel build mykernel.c`` (:func:`build_kernel`) into an ELF
whose entry point is called as ``entry(argsAddr, argsSize)`` on a SHAVE tile. pydla calls it with
one argument convention, here and for the ONNX custom operator (``ai.pydla`` ``ShaveKernel``, see
:mod:`pydla.compiler.custom_kernel`):

    the argument buffer (at WIN_E) holds one ``MemRefData`` (32 bytes) per input, in order, then
    one per output, then the caller's parameter bytes as they are given;

so a kernel declares ``typedef struct __attribute__((packed)) { MemRefData input, output; float a,
b; } MyParams;`` and checks ``argsSize == sizeof(MyParams)``. Each MemRefData is static and dense:
its data in the tile's CMX (WIN_F), its dims and strides (in bits) in WIN_E after the kernel's own
RW data; ``dataType`` says the element type. The whole of every tensor is in CMX at once (a kernel
of unknown semantics cannot be cut into chunks), one invocation on tile 0, between a DMA of the
inputs into CMX and a DMA of the outputs back.

Usage::

    k = pydla.ShaveKernel("scale_add.elf")                  # path or ELF bytes
    y = k(x, params=struct.pack("<ff", 2.0, 1.0))           # one output, shaped and typed like x
    y, = k.run([x], outputs=[(x.shape, np.float32)], params=b"...")
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.hw.shave.build import RUNTIME, build_kernel, kernel_elf
from pydla.loadable.shave_task import (
    DEFAULT_STACK,
    MEMREF_TYPES,
    ShaveTaskBuilder,
    cmx_place,
    memref,
    usable_cmx,
)
from pydla.loadable.taskbuilder import Ref

__all__ = ["MEMREF_BYTES", "RUNTIME", "ShaveKernel", "build_kernel", "check_elf", "plan_invocation",
           "runtime_elf"]

MEMREF_BYTES = ctypes.sizeof(S.MemRefData)
MAX_ELF_BYTES = 16 << 20
DATA_TYPES = MEMREF_TYPES  # the element types a MemRefData describes
CACHED_LOADABLES = 8  # per kernel: distinct (shapes, dtypes, params) kept loaded

Spec = tuple[tuple[int, ...], np.dtype[Any]]


def runtime_elf() -> bytes:
    """pydla's runtime kernel (the ELF each tile runs to take tasks from its FIFO)."""
    return kernel_elf(RUNTIME)


# -- the kernel image ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelImage:
    """A checked kernel ELF: where it enters (an offset in WIN_D) and where its RW data ends in WIN_E."""

    elf: bytes
    entry_offset: int
    rw_end: int  # offset in WIN_E after the kernel's writable segments (ARGS_MAX_BYTES when none)


def check_elf(elf: bytes, what: str, entry: str | None = None) -> KernelImage:
    """``elf`` checked as the device will load it (DlaError BadValue naming ``what`` otherwise);
    ``entry``: a function to enter instead of the ELF's entry point (needs its symbol table).

    Usage: ``image = check_elf(Path("scale_add.elf").read_bytes(), "kernel 'scale_add'")``"""
    from pydla.hw.shave.elfload import check_entry, parse_elf
    from pydla.hw.shave.faults import ShaveFault

    if len(elf) > MAX_ELF_BYTES:
        raise DlaError(NvError.InvalidSize, f"{what}: {len(elf)} bytes, more than a kernel ELF may have "
                                            f"({MAX_ELF_BYTES})")
    rw_window = (S.WIN_E + S.ARGS_MAX_BYTES, S.WIN_E_BYTES - S.ARGS_MAX_BYTES, True)
    try:
        image = parse_elf(elf, what, [(S.WIN_D, S.WIN_D_BYTES, False), rw_window])
        address = image.entry if entry is None else _symbol(elf, entry, what)
        check_entry(image, address, what)
    except ShaveFault as e:
        detail = e.message.removeprefix(f"{what}: ")
        raise DlaError(NvError.BadValue, f"{what}: not a SHAVE kernel ELF: {detail} (build kernels with "
                                         "`pydla kernel build`)") from None
    rw_end = max([S.ARGS_MAX_BYTES] + [s.vaddr + s.memsz - S.WIN_E for s in image.segments if s.writable])
    return KernelImage(bytes(elf), address - S.WIN_D, rw_end)


def _symbol(elf: bytes, name: str, what: str) -> int:
    """The address of function ``name`` in the ELF's symbol table."""
    import io

    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        table = ELFFile(io.BytesIO(elf)).get_section_by_name(".symtab")
        found = table.get_symbol_by_name(name) if isinstance(table, SymbolTableSection) else None
    except (ELFError, ValueError, OSError) as e:
        raise DlaError(NvError.BadValue, f"{what}: cannot read its symbol table: {e}") from None
    if table is None:
        raise DlaError(NvError.BadParameter, f"{what}: entry '{name}': the ELF has no symbol table (it is "
                                             f"stripped, as `pydla kernel build` makes it: build it with "
                                             f"--entry {name} instead)")
    if not found or found[0]["st_info"]["type"] != "STT_FUNC":
        raise DlaError(NvError.BadParameter, f"{what}: entry '{name}' is not a function of the ELF")
    return int(found[0]["st_value"])


def read_elf(elf: str | os.PathLike[str] | bytes, what: str = "kernel") -> tuple[bytes, str]:
    """A kernel ELF's bytes and a name for it (the file's stem), from a path or the bytes.

    Usage: ``data, name = read_elf("scale_add.elf")``  # name "scale_add"
    """
    if isinstance(elf, (bytes, bytearray, memoryview)):
        return bytes(elf), "kernel"
    if not isinstance(elf, (str, os.PathLike)):
        raise DlaError(NvError.BadParameter, f"{what}: a path or the ELF's bytes, not {type(elf).__name__}")
    path = Path(elf)
    try:
        if path.stat().st_size > MAX_ELF_BYTES:
            raise DlaError(NvError.InvalidSize, f"{what} '{path}': {path.stat().st_size} bytes, more than a "
                                                f"kernel ELF may have ({MAX_ELF_BYTES})")
        return path.read_bytes(), path.stem
    except FileNotFoundError:
        raise DlaError(NvError.FileNotFound, f"{what} '{path}': no such file") from None
    except OSError as e:
        raise DlaError(NvError.FileReadFailed, f"{what} '{path}': {e.strerror or e}") from None


# -- the invocation (shared with pydla.compiler.custom_kernel) ------------------------------------------

@dataclass(frozen=True)
class Invocation:
    """One call of a custom kernel, laid out: CMX offsets of its inputs and outputs, the argument
    buffer and the RW data (dims and strides) with where it goes in WIN_E."""

    args: bytes
    data: bytes
    data_offset: int
    inputs: tuple[int, ...]  # CMX offsets
    outputs: tuple[int, ...]
    stack: int


def plan_invocation(image: KernelImage, inputs: Sequence[Spec], outputs: Sequence[Spec], params: bytes,
                    cmx_bytes: int, what: str, stack: int = DEFAULT_STACK) -> Invocation:
    """Lay out a call of ``image`` on ``inputs`` and ``outputs`` ((shape, dtype) each) with
    ``params`` after their MemRefData, in a tile of ``cmx_bytes`` CMX with a ``stack``-byte stack;
    DlaError naming ``what`` when a tensor's type is not a MemRefData type or they do not fit.

    Usage: ``inv = plan_invocation(image, [((4, 4), f32)], [((4, 4), f32)], b"", 2 << 20, "k")``
    """
    if not outputs:
        raise DlaError(NvError.BadParameter, f"{what}: a kernel needs at least one output")
    if stack % 16 or not 256 <= stack <= cmx_bytes // 2:
        raise DlaError(NvError.BadParameter, f"{what}: stack of {stack} bytes: a multiple of 16, "
                                             f"256..{cmx_bytes // 2}")
    capacity = usable_cmx(cmx_bytes, stack)
    offsets: list[int] = []
    used = 0
    for k, (shape, dtype) in enumerate([*inputs, *outputs]):
        name = f"input {k}" if k < len(inputs) else f"output {k - len(inputs)}"
        if dtype not in DATA_TYPES:
            raise DlaError(NvError.NotSupported, f"{what}: {name} is {dtype}; a SHAVE kernel takes "
                                                 f"{', '.join(str(t) for t in DATA_TYPES)}")
        if len(shape) > S.MAX_DIMS or 0 in shape:
            raise DlaError(NvError.BadParameter, f"{what}: {name} of shape {tuple(shape)}: a MemRefData "
                                                 f"has 0..{S.MAX_DIMS} dimensions, none of them 0")
        at = cmx_place(used)
        used = at + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offsets.append(at)
    if used > capacity:
        sizes = ", ".join(f"{tuple(s)} {d}" for s, d in [*inputs, *outputs])
        raise DlaError(NvError.InsufficientMemory,
                       f"{what}: the tensors ({sizes}) need {used} bytes of CMX, page-aligned; a tile has "
                       f"{capacity} beside its {stack}-byte stack (cmx_bytes {cmx_bytes}): the whole of "
                       "every tensor must fit, split the work into smaller calls")
    data_offset = -(-image.rw_end // 16) * 16
    data = bytearray()
    memrefs = [memref(shape, dtype, S.WIN_F + at, data, data_offset)
               for (shape, dtype), at in zip([*inputs, *outputs], offsets, strict=True)]
    args = b"".join(bytes(m) for m in memrefs) + bytes(params)
    if len(args) > S.ARGS_MAX_BYTES:
        raise DlaError(NvError.InvalidSize, f"{what}: {len(args)} argument bytes ({len(memrefs)} MemRefData "
                                            f"and {len(params)} parameter bytes), at most {S.ARGS_MAX_BYTES}")
    if data_offset + len(data) > S.WIN_E_BYTES:
        raise DlaError(NvError.InvalidSize, f"{what}: the kernel's RW data ends at WIN_E + {image.rw_end}: "
                                            f"no room for its arguments' dims and strides ({len(data)} "
                                            f"bytes) in the {S.WIN_E_BYTES}-byte WIN_E")
    n = len(inputs)
    return Invocation(args, bytes(data), data_offset, tuple(offsets[:n]), tuple(offsets[n:]), stack)


def task_list(tiles: int, cmx_bytes: int, barriers: int, runtime: Ref, kernel: Ref, image: KernelImage,
              inv: Invocation, inputs: Sequence[Ref], outputs: Sequence[Ref], *, kernel_id: int = 0,
              name: str = "") -> ShaveTaskBuilder:
    """The SHAVE task list of one call on tile 0: each input DMA'd into CMX, the kernel, each output
    DMA'd back; barriers between.

    Usage: ``sb = task_list(2, 2 << 20, 32, runtime_ref, kernel_ref, image, inv, [x_ref], [y_ref])``
    """
    sb = ShaveTaskBuilder(tiles, cmx_bytes, barriers)
    sb.runtime(runtime, {0: inv.stack})
    loaded, computed = sb.barrier(), sb.barrier()
    for ref, at in zip(inputs, inv.inputs, strict=True):
        sb.dma(ref, tile=0, cmx_offset=at, to_cmx=True, line_size=ref.size, update=[loaded])
    sb.invoke(kernel, entry_offset=image.entry_offset, args=inv.args, tile=0, data=inv.data,
              data_offset=inv.data_offset, kernel_id=kernel_id, wait=[loaded] if inputs else [],
              update=[computed], name=name)
    for ref, at in zip(outputs, inv.outputs, strict=True):
        sb.dma(ref, tile=0, cmx_offset=at, to_cmx=False, line_size=ref.size, wait=[computed])
    return sb


def params_bytes(params: Any, what: str) -> bytes:
    """The caller's parameter bytes: bytes-like, a ctypes object, or a numpy array (its bytes)."""
    if params is None:
        return b""
    if isinstance(params, (bytes, bytearray, memoryview)):
        return bytes(params)
    if isinstance(params, (ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._SimpleCData)):
        return bytes(memoryview(params).cast("B"))
    if isinstance(params, np.ndarray):
        return np.ascontiguousarray(params).tobytes()
    raise DlaError(NvError.BadParameter, f"{what}: params must be bytes, a ctypes object or a numpy array, "
                                         f"not {type(params).__name__}")


def _nbytes(spec: Spec) -> int:
    return int(np.prod(spec[0], dtype=np.int64)) * spec[1].itemsize


def buffer_name(name: str) -> str:
    """The loadable buffer of kernel ``name``'s ELF (``pydla info`` lists it): ``shave_<name>``."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)[:40] or "kernel"
    return f"shave_{clean}" if clean != RUNTIME else "shave_runtime_custom"  # not pydla's runtime kernel


# -- the public API -----------------------------------------------------------------------------------

CUSTOM_KERNEL_ID = 0x100  # the kernel id error reports name for a custom kernel


def loadable(image: KernelImage, inputs: Sequence[Spec], outputs: Sequence[Spec], params: bytes, *,
             config: str = "full", stack: int = DEFAULT_STACK, name: str = "kernel") -> bytes:
    """A loadable running ``image`` once on tensors ``in0``.. ``out0``.. (see the module docstring).

    Usage: ``pydla.Session(loadable(image, [((8,), f32)], [((8,), f32)], params)).run({"in0": x})``
    """
    from pydla.loadable.container import NUMPY_TYPES, LoadableWriter
    from pydla.target.config import load_config

    cfg = load_config(config)
    if cfg.shave is None or cfg.shave.tiles == 0:
        raise DlaError(NvError.NotSupported, f"kernel '{name}': device configuration '{cfg.name}' has no "
                                             "SHAVE tiles (use 'full')")
    shave = cfg.shave
    inv = plan_invocation(image, inputs, outputs, params, shave.cmx_bytes, f"kernel '{name}'", stack)
    runtime = runtime_elf()
    kernel = buffer_name(name)
    codes = {d: t for t, d in NUMPY_TYPES.items()}
    ins = [Ref(f"in{i}", 0, _nbytes(spec)) for i, spec in enumerate(inputs)]
    outs = [Ref(f"out{i}", 0, _nbytes(spec)) for i, spec in enumerate(outputs)]
    sb = task_list(shave.tiles, shave.cmx_bytes, shave.barriers, Ref("shave_runtime", 0, len(runtime)),
                   Ref(kernel, 0, len(image.elf)), image, inv, ins, outs, kernel_id=CUSTOM_KERNEL_ID,
                   name=name)
    built = sb.build()
    lw = LoadableWriter(cfg.name)
    lw.add_weights("shave_runtime", runtime)
    lw.add_weights(kernel, image.elf)
    buffers: list[dict[str, Any]] = []
    for i, ref in enumerate([*ins, *outs]):
        kind = "input" if i < len(ins) else "output"
        lw.add_memory(ref.buffer, kind, ref.size)
        buffers.append({"name": ref.buffer, "type": kind})
    for weight, size in (("shave_runtime", len(runtime)), (kernel, len(image.elf))):
        lw.add_memory(weight, "weight", size)
        buffers.append({"name": weight, "type": "weight", "size": size})
    names = [b["name"] for b in buffers]
    for i, (shape, dtype) in enumerate(inputs):
        lw.add_tensor(f"in{i}", names.index(f"in{i}"), tuple(shape), int(codes[dtype]), "input", i)
    for i, (shape, dtype) in enumerate(outputs):
        lw.add_tensor(f"out{i}", names.index(f"out{i}"), tuple(shape), int(codes[dtype]), "output", i)
    arguments = {n: i for i, n in enumerate(b for b in built.buffers if b != "descriptors")}
    lw.add_control_code("task0", built.control_code(arguments))
    lw.set_recipe({"header": {"device": cfg.name, "version": "1.0.0"},
                   "resources": {"buffers": buffers,
                                 "kernels": [{"name": "task0", "instance": "dla", "ctrlcode": "task0"}]},
                   "execution": {"runs": [{"name": "task0", "where": "npu", "arguments": [
                       {"name": n, "argidx": i} for n, i in arguments.items()]}]}})
    return lw.build()


class ShaveKernel:
    """A custom SHAVE kernel ELF run on numpy arrays through the runtime (a loadable with one SHAVE
    task list, submitted like any network), following the argument convention of
    :mod:`pydla.kernels`. Loadables are built and loaded once per (shapes, dtypes, params) and kept
    (the last few), so repeated calls cost one run each.

    Usage::

        with pydla.ShaveKernel("scale_add.elf") as k:
            y = k(x, params=np.array([2.0, 1.0], np.float32))     # y = 2 x + 1
            a, b = k.run([x, z], outputs=[(x.shape, np.float32)] * 2)

    Parameters:
        elf: the kernel's ELF (a path, or its bytes), built with ``pydla kernel build``.
        entry: the function to enter instead of the ELF's entry point (needs an unstripped ELF).
        config: the device configuration; it must have SHAVE tiles ("full").
        port, timeout_ms: as :class:`pydla.Session`.
        stack_bytes: the tile's stack (default 8 KiB; a multiple of 16).
    """

    def __init__(self, elf: str | os.PathLike[str] | bytes, *, entry: str | None = None, config: str = "full",
                 port: str | None = None, timeout_ms: int = 60_000, stack_bytes: int = DEFAULT_STACK) -> None:
        data, self.name = read_elf(elf)
        self.image = check_elf(data, f"kernel '{self.name}'", entry)
        self.config, self.port, self.timeout_ms, self.stack_bytes = config, port, timeout_ms, stack_bytes
        self._sessions: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, *inputs: Any, params: Any = None, output: Spec | None = None) -> np.ndarray:
        """One output (``output``: (shape, dtype); default: input 0's)."""
        return self.run(inputs, [output] if output is not None else None, params)[0]

    def run(self, inputs: Sequence[Any], outputs: Sequence[tuple[Sequence[int], Any]] | None = None,
            params: Any = None) -> list[np.ndarray]:
        """Call the kernel once: ``inputs`` (arrays), ``outputs`` ((shape, dtype) each; default one
        like input 0), ``params`` (bytes, a ctypes object or a numpy array) after the MemRefData.
        Returns the outputs' arrays."""
        what = f"kernel '{self.name}'"
        arrays = [np.ascontiguousarray(x) for x in inputs]
        if outputs is None:
            if not arrays:
                raise DlaError(NvError.BadParameter, f"{what}: no inputs, so give outputs=[(shape, dtype)]")
            outputs = [(arrays[0].shape, arrays[0].dtype)]
        out_specs: list[Spec] = []
        for k, spec in enumerate(outputs):
            try:
                shape, dtype = spec
                out_specs.append((tuple(int(d) for d in shape), np.dtype(dtype)))
            except (TypeError, ValueError):
                raise DlaError(NvError.BadParameter,
                               f"{what}: output {k} is {spec!r}, not (shape, dtype)") from None
        in_specs: list[Spec] = [(a.shape, a.dtype) for a in arrays]
        raw = params_bytes(params, what)
        key = (tuple(in_specs), tuple(out_specs), raw)
        with self._lock:
            session = self._session(key, in_specs, out_specs, raw)
            try:
                result = session.run({f"in{i}": a for i, a in enumerate(arrays)})
            except DlaError as e:  # a fault of the kernel, as the driver reports it: say whose
                raise DlaError(e.code, f"{what}: {e.message}") from e
        return [np.array(result[f"out{i}"]) for i in range(len(out_specs))]

    def _session(self, key: tuple[Any, ...], inputs: list[Spec], outputs: list[Spec], params: bytes) -> Any:
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            return session
        from pydla.session import Session

        blob = loadable(self.image, inputs, outputs, params, config=self.config, stack=self.stack_bytes,
                        name=self.name)
        session = Session(blob, port=self.port, config=self.config, timeout_ms=self.timeout_ms)
        self._sessions[key] = session
        while len(self._sessions) > CACHED_LOADABLES:
            self._sessions.popitem(last=False)[1].close()
        return session

    def close(self) -> None:
        """Close the runtimes of the loadables kept loaded."""
        with self._lock:
            while self._sessions:
                self._sessions.popitem()[1].close()

    def __enter__(self) -> ShaveKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
