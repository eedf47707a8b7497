"""Lowering to the device's SHAVE tiles (the VPUX software layers' ACT_SHAVE kernels).

On a configuration with SHAVE tiles, the operators the shipped kernels compute run there instead of
as host CPU runs: Softmax and LogSoftmax (``softmax``, ``log_softmax``), Exp, Log, Sqrt, Erf, Gelu,
Softplus and Mish (``activation``), the Reduce* operators over constant adjacent axes (``reduce``),
and LayerNormalization (``layernorm``, fp32 models). Each step
becomes one SHAVE task list (one task of the run recipe) per part that fits the tiles' CMX at once:

- the tensor is cut into chunks of whole rows (a row: what the kernel normalises together, or any
  run of elements for an element-wise kernel), each small enough for its input and output to fit
  one tile's CMX beside the stack, and spread over the tiles when it is large enough to pay;
- per chunk: a DMA task copies the rows into the tile's CMX (updating a barrier), the kernel task
  waits for it and updates a second barrier, and a DMA task waits for that and copies the result
  back; a layer normalisation's scale and bias are copied into each tile once;
- the kernels' ELFs (and pydla's runtime kernel) are constant buffers of the loadable,
  ``shave_<kernel>``.

Where a step does not fit what a kernel handles (an integer or float64 tensor, Gelu's tanh form, a
layer normalisation in fp16) it stays a CPU run, and a configuration without tiles (or
``compile_model(..., shave=False)``) keeps them all on the host.

Usage: ``shave_ops.softmax_step(lw, step)`` (a SHAVE task list, or the CPU run when it cannot)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.compiler import cpuops
from pydla.compiler.layout import normalize_axis, prod
from pydla.compiler.plan import Step, attr
from pydla.deviceapi.generated import shave as S
from pydla.errors import DlaError, NvError
from pydla.kernels.build import kernel_elf
from pydla.kernels.image import check_elf
from pydla.kernels.memref import DEFAULT_STACK, PAGE, cmx_place, memref, usable_cmx
from pydla.loadable.mixed_task import MixedTask
from pydla.loadable.shave_task import ShaveTaskBuilder
from pydla.loadable.taskbuilder import Ref, TaskBuilder

if TYPE_CHECKING:
    from pydla.compiler.lower import Lowering

SPREAD_BYTES = 256 << 10  # a step smaller than this runs on one tile: another invocation costs more
ACTIVATION_OPS = {"Exp": S.shave_activation_e.EXP, "Erf": S.shave_activation_e.ERF,
                  "Gelu": S.shave_activation_e.GELU, "Sqrt": S.shave_activation_e.SQRT,
                  "Log": S.shave_activation_e.LOG, "Softplus": S.shave_activation_e.SOFTPLUS,
                  "Mish": S.shave_activation_e.MISH}
SOFTMAX_KERNELS = {"Softmax": "softmax", "LogSoftmax": "log_softmax"}
REDUCE_OPS = {"ReduceSum": S.shave_reduce_e.SUM, "ReduceMean": S.shave_reduce_e.MEAN,
              "ReduceMax": S.shave_reduce_e.MAX, "ReduceMin": S.shave_reduce_e.MIN,
              "ReduceProd": S.shave_reduce_e.PROD, "ReduceL1": S.shave_reduce_e.L1,
              "ReduceL2": S.shave_reduce_e.L2,
              "ReduceSumSquare": S.shave_reduce_e.SUM_SQUARE, "ReduceLogSum": S.shave_reduce_e.LOG_SUM,
              "ReduceLogSumExp": S.shave_reduce_e.LOG_SUM_EXP}
_TYPES = (np.dtype(np.float32), np.dtype(np.float16))  # what the shipped kernels compute


def enabled(lw: Lowering) -> bool:
    shave = lw.config.shave
    return bool(lw.use_shave and shave is not None and shave.tiles > 0)


@dataclass(frozen=True)
class Rows:
    """A tensor seen as ``rows`` rows of ``row`` elements (its result: rows of ``out_row``, or of
    ``row`` when None): what a chunk of it holds."""

    rows: int
    row: int
    out_row: int | None = None

    @property
    def result_row(self) -> int:
        return self.row if self.out_row is None else self.out_row


class _Lists:
    """The task lists one step becomes, each as many chunks as fit the tiles' CMX at once."""

    def __init__(self, lw: Lowering, element_in: int, element_out: int, rows: Rows,
                 resident: int = 0) -> None:
        shave = lw.config.shave
        assert shave is not None
        self.tiles = shave.tiles
        self.cmx = shave.cmx_bytes
        self.barriers = shave.barriers
        self.limit = usable_cmx(self.cmx, DEFAULT_STACK)  # the data below the stack's guard page
        self.capacity = self.limit - resident - 2 * PAGE  # room for the chunks' data
        per_row = max(rows.row * element_in + rows.result_row * element_out, 1)
        # Two pages of the room go to aligning the chunk's input and output.
        self.rows_per_chunk = max(1, min(rows.rows, (self.capacity - 2 * PAGE) // per_row))
        total = rows.rows * per_row
        if total >= SPREAD_BYTES and rows.rows >= self.tiles:  # spread: at least one chunk per tile
            self.rows_per_chunk = min(self.rows_per_chunk, -(-rows.rows // self.tiles))

    def fits(self, rows: Rows, element_in: int, element_out: int) -> bool:
        need = rows.row * element_in + rows.result_row * element_out + 2 * PAGE
        return need <= self.capacity


Chunk = tuple[int, int, int, int, int]  # tile, first row, rows, input's CMX offset, output's


def _groups(lists: _Lists, rows: int, row_in: int, row_out: int, vector_bytes: int,
            vectors: bool) -> list[list[Chunk]]:
    """The chunks of ``rows`` rows, in lists: each list holds as many chunks as its tiles' CMX holds
    at once (after the vectors each tile keeps) and its barriers allow (two a chunk, one a tile's
    vectors, one for the list's end)."""
    groups: list[list[Chunk]] = []
    used: dict[int, int] = {}
    for start in range(0, rows, lists.rows_per_chunk):
        count = min(lists.rows_per_chunk, rows - start)
        group = groups[-1] if groups else None
        barriers_left = lists.barriers - 1 - 2 * len(group or []) - (lists.tiles if vectors else 0)
        tile = len(group) % lists.tiles if group is not None else 0
        in_at = cmx_place(used.get(tile, vector_bytes) if group is not None else vector_bytes)
        out_at = cmx_place(in_at + count * row_in)
        if group is None or barriers_left < 2 or out_at + count * row_out > lists.limit:
            groups.append([])
            used = {}
            tile = 0
            in_at = cmx_place(vector_bytes)
            out_at = cmx_place(in_at + count * row_in)
        used[tile] = out_at + count * row_out
        groups[-1].append((tile, start, count, in_at, out_at))
    return groups


def _run_rows(lw: Lowering, step: Step, kernel: str, rows: Rows, src: str, dst: str,
              params: Any, vectors: list[Ref] | None = None) -> bool:
    """Lower a row-wise kernel over tensor ``src`` into ``dst``: ``params(in_addr, out_addr,
    rows_in_chunk, vector_addrs, data)`` returns the kernel's parameter bytes."""
    dt_in, dt_out = lw.storage_dtype(src), lw.storage_dtype(dst)
    if dt_in not in _TYPES or dt_out not in _TYPES:
        return False
    resident = sum(-(-v.size // PAGE) * PAGE + PAGE for v in vectors or [])
    lists = _Lists(lw, dt_in.itemsize, dt_out.itemsize, rows, resident)
    if not lists.fits(rows, dt_in.itemsize, dt_out.itemsize) or rows.rows * rows.row == 0:
        return False
    src_buf, src_off = lw.storage(src)
    dst_buf, dst_off = lw.storage(dst)
    elf = kernel_elf(kernel)
    elf_runtime = lw.kernel_data("runtime", kernel_elf("runtime"))
    elf_kernel = lw.kernel_data(kernel, elf)
    entry = check_elf(elf, "shipped kernel").entry_offset
    row_in, row_out = rows.row * dt_in.itemsize, rows.result_row * dt_out.itemsize
    vector_bytes = sum(v.size for v in vectors or []) + PAGE * len(vectors or [])
    # Each list emits all its DMA-ins, then the kernels, then all DMA-outs, so that the DMA queue
    # loads every chunk before it waits for the first kernel.
    for number, group in enumerate(_groups(lists, rows.rows, row_in, row_out, vector_bytes, bool(vectors))):
        sb = ShaveTaskBuilder(lists.tiles, lists.cmx, lists.barriers)
        sb.runtime(elf_runtime)
        # The first list runs beside the DLA operations before it, each chunk's DMA started by the
        # barrier its producers update (the VPUX per-variant barriers), when the barriers suffice.
        after = None
        if number == 0 and lw.shave_barriers:
            after = _after_operations(lw, sb, group, Ref(src_buf, src_off, row_in),
                                      Ref(dst_buf, dst_off, row_out), len(vectors or []))
        if after is None:
            lw.finish_task()
        vector_at: dict[int, tuple[list[int], int | None]] = {}
        for tile in sorted({g[0] for g in group}):
            addrs: list[int] = []
            ready = None
            if vectors:
                ready, at = sb.barrier(), 0
                for v in vectors:
                    at = cmx_place(at)
                    sb.dma(v, tile=tile, cmx_offset=at, to_cmx=True, line_size=v.size, update=[ready])
                    addrs.append(S.WIN_F + at)
                    at += v.size
            vector_at[tile] = (addrs, ready)
        loaded = [sb.barrier() for _ in group]
        computed = [sb.barrier() for _ in group]
        for k, ((tile, start, count, in_at, _), b) in enumerate(zip(group, loaded, strict=True)):
            sb.dma(Ref(src_buf, src_off + start * row_in, count * row_in), tile=tile, cmx_offset=in_at,
                   to_cmx=True, line_size=count * row_in, update=[b],
                   wait=after.barrier(after.inputs[k]) if after else [])
        for (tile, _, count, in_at, out_at), b_in, b_out in zip(group, loaded, computed, strict=True):
            addrs, ready = vector_at[tile]
            data = bytearray()
            args = params(S.WIN_F + in_at, S.WIN_F + out_at, count, addrs, data)
            sb.invoke(elf_kernel, entry_offset=entry, args=bytes(args), tile=tile, data=bytes(data),
                      kernel_id=_kernel_id(kernel), wait=[b_in] + ([ready] if ready is not None else []),
                      update=[b_out], name=step.head.name)
        for k, ((tile, start, count, _, out_at), b) in enumerate(zip(group, computed, strict=True)):
            sb.dma(Ref(dst_buf, dst_off + start * row_out, count * row_out), tile=tile, cmx_offset=out_at,
                   to_cmx=False, line_size=count * row_out,
                   wait=[b, *(after.barrier(after.outputs[k]) if after else [])])
        if after is None:
            lw.runs.append(("shave", sb))
            continue
        mixed = MixedTask(lw.tb, sb)
        for ops, barrier in after.barriers.items():
            for op in ops:
                mixed.barriers(op, update=[barrier])
        lw.runs.append(("mixed", mixed))
        lw.tb = TaskBuilder(lw.precision)
    return True


class _After:
    """The DLA operations a list's chunks wait for: per chunk, those writing its input (the DMA in
    waits) and those reading or writing where its result goes (the DMA out waits); one barrier per
    distinct set, updated by each operation of it."""

    def __init__(self, sb: ShaveTaskBuilder, inputs: list[frozenset[int]],
                 outputs: list[frozenset[int]]) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.barriers: dict[frozenset[int], int] = {}
        for ops in {*inputs, *outputs} - {frozenset()}:
            self.barriers[ops] = sb.barrier()

    def barrier(self, ops: frozenset[int]) -> list[int]:
        return [self.barriers[ops]] if ops else []


def _after_operations(lw: Lowering, sb: ShaveTaskBuilder, group: list[Chunk], src: Ref, dst: Ref,
                      vectors: int) -> _After | None:
    """The first list of a step beside the DLA operations being built (``lw.tb``), or None: no
    operation, all chunks waiting for the same ones (nothing to start early), or not enough barriers
    left (then the operations end their task first, as without barriers). ``src`` / ``dst``: the
    tensors' first row."""
    ops = lw.tb.ops
    if not ops:
        return None

    def touching(buffer: str, start: int, size: int, writes_only: bool) -> frozenset[int]:
        found = set()
        for op in ops:
            for ref in op.writes if writes_only else [*op.writes, *op.reads]:
                if ref.buffer == buffer and ref.offset < start + size and start < ref.offset + ref.size:
                    found.add(op.index)
        return frozenset(found)

    def last_per_block(found: frozenset[int], done: frozenset[int] = frozenset()) -> frozenset[int]:
        """A block completes its operations in chain (index) order: the last of each block's says
        all of them ended; one that an operation in ``done`` of its block follows needs no barrier."""
        last: dict[Any, int] = {}
        for i in sorted(found):
            last[ops[i].block] = i
        for i in done:
            if last.get(ops[i].block, i + 1) <= i:
                del last[ops[i].block]
        return frozenset(last.values())

    inputs = [last_per_block(touching(src.buffer, src.offset + first * src.size, count * src.size, True))
              for _, first, count, _, _ in group]
    # A DMA out comes after every DMA in of the list (one DMA FIFO): what those waited for ended.
    loaded = frozenset().union(*inputs)
    outputs = [last_per_block(touching(dst.buffer, dst.offset + first * dst.size, count * dst.size, False),
                              loaded) for _, first, count, _, _ in group]
    if len(set(inputs)) < 2:
        # Every chunk waits for the same operations: no chunk could start before the others'
        # producers ended, and one task instead of two saves nothing measurable (bench_barriers).
        return None
    needed = len({*inputs, *outputs} - {frozenset()})
    # The list's own: two a chunk, one a tile's vectors, the last for its end.
    own = 2 * len(group) + (len({c[0] for c in group}) if vectors else 0)
    if sb.barriers + own + needed > sb.max_barriers - 1:
        return None
    return _After(sb, inputs, outputs)


KERNEL_IDS = {"softmax": 1, "activation": 2, "layernorm": 3, "clamp": 4, "log_softmax": 5, "reduce": 6}


def _kernel_id(name: str) -> int:
    return KERNEL_IDS.get(name, 0)


# -- the operators ---------------------------------------------------------------------------------------

def softmax(lw: Lowering, step: Step) -> bool:
    """Softmax or LogSoftmax along one axis (opset 13; earlier ones over the axes from ``axis`` on,
    flattened)."""
    n = step.head
    kernel = SOFTMAX_KERNELS.get(n.op_type)
    if not enabled(lw) or kernel is None:
        return False
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    if lw.g.dtypes[src].kind != "f" or not shape:
        return False
    rank = len(shape)
    axis = normalize_axis(int(attr(n, "axis", -1 if lw.g.opset >= 13 else 1)), rank, n.where())
    outer = prod(shape[:axis])
    length = shape[axis] if lw.g.opset >= 13 else prod(shape[axis:])
    inner = prod(shape[axis + 1:]) if lw.g.opset >= 13 else 1
    dt_in, dt_out = lw.storage_dtype(src), lw.storage_dtype(step.output)

    def params(in_addr: int, out_addr: int, count: int, _: list[int], data: bytearray) -> bytes:
        dims = (count, length) if inner == 1 else (count, length, inner)
        p = S.SoftmaxParams(input=memref(dims, dt_in, in_addr, data),
                            output=memref(dims, dt_out, out_addr, data), axis=1)
        return bytes(p)

    return _run_rows(lw, step, kernel, Rows(outer, length * inner), src, step.output, params)


def unary(lw: Lowering, step: Step) -> bool:
    """Exp, Log, Sqrt, Erf, Gelu (its erf form), Softplus and Mish element by element."""
    n = step.head
    op = ACTIVATION_OPS.get(n.op_type)
    if not enabled(lw) or op is None:
        return False
    if n.op_type == "Gelu":
        approximate = attr(n, "approximate", "none")
        if (approximate.decode() if isinstance(approximate, bytes) else str(approximate)) != "none":
            return False
    src = n.inputs[0]
    if lw.g.dtypes[src].kind != "f":
        return False
    size = prod(lw.g.shapes[src])
    dt_in, dt_out = lw.storage_dtype(src), lw.storage_dtype(step.output)
    row = 256 if size % 256 == 0 else 1  # rows of 256: fewer, larger DMA lines

    def params(in_addr: int, out_addr: int, count: int, _: list[int], data: bytearray) -> bytes:
        dims = (count * row,)
        return bytes(S.ActivationParams(input=memref(dims, dt_in, in_addr, data),
                                        output=memref(dims, dt_out, out_addr, data), op=int(op)))

    return _run_rows(lw, step, "activation", Rows(size // row, row), src, step.output, params)


def layernorm(lw: Lowering, step: Step) -> bool:
    """LayerNormalization (its first output) of an fp32 tensor over the axes from ``axis`` on."""
    n = step.head
    if not enabled(lw):
        return False
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    if lw.storage_dtype(src) != np.float32 or lw.storage_dtype(step.output) != np.float32 or not shape:
        return False
    axis = normalize_axis(int(attr(n, "axis", -1)), len(shape), n.where())
    group = prod(shape[axis:])
    vectors: list[Ref] = []
    for index, default in ((1, 1.0), (2, 0.0)):
        name = n.inputs[index] if index < len(n.inputs) else ""
        if name and name not in lw.g.consts:
            return False  # scale or bias computed at run time: the decomposed form handles it
        value = lw.g.consts[name] if name else np.full(group, default)
        vectors.append(lw.const_raw(np.broadcast_to(np.asarray(value, np.float32).ravel(), (group,)),
                                    np.dtype(np.float32)))
    epsilon = float(attr(n, "epsilon", 1e-5))
    empty = S.MemRefData()

    def params(in_addr: int, out_addr: int, count: int, addrs: list[int], data: bytearray) -> bytes:
        dims = (count, group)
        f32 = np.dtype(np.float32)
        scale = memref((group,), f32, addrs[0], data) if addrs else empty
        bias = memref((group,), f32, addrs[1], data) if addrs else empty
        return bytes(S.LayerNormParams(input=memref(dims, f32, in_addr, data),
                                       output=memref(dims, f32, out_addr, data),
                                       scale=scale, bias=bias, axis=1, epsilon=epsilon))

    return _run_rows(lw, step, "layernorm", Rows(prod(shape[:axis]), group), src, step.output, params,
                     vectors)


def reduce(lw: Lowering, step: Step) -> bool:
    """A Reduce* of a float tensor over constant axes that are one block of adjacent dimensions:
    the input as (A, R, B), reduced over R."""
    n = step.head
    op = REDUCE_OPS.get(n.op_type)
    src = n.inputs[0]
    shape = lw.g.shapes[src]
    if not enabled(lw) or op is None or lw.g.dtypes[src].kind != "f" or not shape:
        return False
    if lw.g.opset >= cpuops.AXES_INPUT_SINCE.get(n.op_type, 18):
        name = n.inputs[1] if len(n.inputs) > 1 else ""
        if name and name not in lw.g.consts:
            return False  # axes given at run time: the CPU run reads them
        axes = [int(a) for a in np.asarray(lw.g.consts[name]).ravel()] if name else []
    else:
        axes = [int(a) for a in attr(n, "axes", [])]
    if not axes:
        if int(attr(n, "noop_with_empty_axes", 0)):
            return False
        axes = list(range(len(shape)))
    axes = sorted({normalize_axis(a, len(shape), n.where()) for a in axes})
    if axes != list(range(axes[0], axes[-1] + 1)):
        return False  # not one block of adjacent dimensions
    first, last = axes[0], axes[-1] + 1
    outer, reduced, inner = prod(shape[:first]), prod(shape[first:last]), prod(shape[last:])
    if reduced == 0:
        return False
    dt_in, dt_out = lw.storage_dtype(src), lw.storage_dtype(step.output)

    def params(in_addr: int, out_addr: int, count: int, _: list[int], data: bytearray) -> bytes:
        return bytes(S.ReduceParams(input=memref((count, reduced, inner), dt_in, in_addr, data),
                                    output=memref((count, inner), dt_out, out_addr, data), op=int(op)))

    return _run_rows(lw, step, "reduce", Rows(outer, reduced * inner, inner), src, step.output, params)


# -- the steps (pydla.compiler.lower.LOWER): on the tiles where a kernel computes them, else as before --

def softmax_step(lw: Lowering, step: Step) -> None:
    if not softmax(lw, step):
        cpuops.softmax(lw, step)


def unary_step(lw: Lowering, step: Step) -> None:
    if not unary(lw, step):
        cpuops.unary_run(lw, step)


def layernorm_step(lw: Lowering, step: Step) -> None:
    """A LayerNormalization the import kept whole (pydla.compiler.graph.keeps_whole): the tiles
    compute it, or the compile fails naming why (the import decomposes the others)."""
    if not layernorm(lw, step):
        raise DlaError(NvError.NotSupported,
                       f"{step.head.where()}: kept whole for the SHAVE tiles, which cannot take it here "
                       "(compile with shave=False / --no-shave to decompose it)")


def reduce_step(lw: Lowering, step: Step) -> None:
    if not reduce(lw, step):
        cpuops.reduce_run(lw, step)
