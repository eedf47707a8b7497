"""Reading an ONNX model and the checks made on it as ONNX, before the compiler imports it: a file
that is no ONNX model, an empty model, names that are not defined (and cycles), attributes against
the operator schemas, type constraints, and the upgrade of opsets before :data:`MIN_OPSET` (the
rules of the graph itself: :mod:`pydla.compiler.onnx_rules`).

A library's message over several lines (onnx's checker and inference) becomes its first line, the
whole of it chained as a :class:`~pydla.logconfig.Detail` (``pydla -v`` shows it).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx
from onnx import helper

from pydla.elf.reader import ELF_MAGIC
from pydla.errors import DlaError, NvError, file_error
from pydla.logconfig import Detail, first_line, printable

MIN_OPSET = 11


def load_model(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself, or the model in the file at that path; DlaError naming the file when it
    is missing, unreadable, or holds no ONNX model (worded as :func:`parse_model` words it)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise DlaError(NvError.BadParameter,
                       f"a model is a path or an onnx.ModelProto, not {type(model).__name__}")
    path = Path(model)
    try:
        with path.open("rb") as f:
            head = f.read(len(ELF_MAGIC))
    except OSError as e:
        raise file_error(path, e) from None
    check_model_bytes(head, str(path))
    try:
        loaded = onnx.load(str(path))
    except OSError as e:  # external data that cannot be read
        raise DlaError(NvError.FileReadFailed,
                       f"{path}: cannot read the ONNX model's data: {first_line(e)}") from Detail(str(e))
    except Exception as e:  # protobuf's DecodeError and onnx's own, for bytes that are no model
        raise _does_not_parse(str(path), e) from Detail(str(e))
    check_not_empty(loaded, f"{path}: not an ONNX model: ")
    return loaded


def parse_model(data: bytes, label: str) -> onnx.ModelProto:
    """The ONNX model serialized in ``data`` (``label`` names it in messages: a file's path); the
    same DlaError as :func:`load_model` gives for a file holding ``data`` when it is none (empty, an
    ELF file, bytes that do not parse, an empty ModelProto), so that every command words it alike.

    Usage: ``model = parse_model(Path("m.onnx").read_bytes(), "m.onnx")``"""
    check_model_bytes(data[:len(ELF_MAGIC)], label)
    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # protobuf's DecodeError and onnx's own
        raise _does_not_parse(label, e) from Detail(str(e))
    check_not_empty(model, f"{label}: not an ONNX model: ")
    return model


def check_model_bytes(head: bytes, label: str) -> None:
    """What the first bytes of a file tell: empty, or an ELF file (a compiled loadable)."""
    if not head:
        raise DlaError(NvError.BadValue,
                       f"{label}: the file is empty (0 bytes), not an ONNX model or a loadable")
    if head[:len(ELF_MAGIC)] == ELF_MAGIC:
        raise DlaError(NvError.BadValue, f"{label}: not an ONNX model: it is an ELF file (a compiled pydla "
                                         "loadable? `pydla run` and `pydla info` take those)")


def _does_not_parse(label: str, e: Exception) -> DlaError:
    return DlaError(NvError.BadValue, f"{label}: not an ONNX model or a loadable, or a truncated one: it "
                                      f"does not parse as ONNX ({first_line(e)})")


def check_not_empty(model: onnx.ModelProto, prefix: str = "") -> None:
    """An empty ModelProto (what protobuf makes of 0 bytes, and of some bytes that are no model) has
    no graph and imports no opset: say so (the opset check would report "opset 0")."""
    g = model.graph
    if not model.opset_import and not (g.node or g.input or g.output or g.initializer):
        raise DlaError(NvError.BadValue, f"{prefix}the model is empty: it has no graph (no nodes, inputs or "
                                         "outputs) and no opset_import")


def label(n: onnx.NodeProto, i: int) -> str:
    """How messages name node ``i`` (as :meth:`Node.where` does once it is imported)."""
    return f"node '{printable(n.name or f'{n.op_type}_{i}')}' ({printable(n.op_type)})"


def check_names(g: onnx.GraphProto, ios: list[tuple[list[str], list[str]]] | None = None) -> None:
    """Every node input is a graph input, an initializer or an earlier node's output, as onnx's
    checker requires (nodes in topological order); one that a node reads before it is computed
    is reported as a cycle when the nodes form one (onnxruntime: "the graph is not acyclic"), else
    as the order it is. (onnx's checker also insists on declared output shapes, which models built
    with onnx.helper often lack: not required.) ``ios``: each node's inputs and outputs, when the
    caller has them (:func:`pydla.compiler.onnx_rules.node_names`)."""
    ios = [(list(n.input), list(n.output)) for n in g.node] if ios is None else ios
    known = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    producer = {name: i for i, (_, outputs) in enumerate(ios) for name in outputs if name}
    for i, (n, (inputs, outputs)) in enumerate(zip(g.node, ios, strict=True)):
        for name in inputs:
            if name in known:
                continue
            if name not in producer:
                raise DlaError(NvError.BadValue, f"{label(n, i)}: input '{printable(name)}' is not "
                                                 "a graph input, an initializer or any node's output")
            cycle = _cycle(ios, producer, i)
            if cycle:
                path = " -> ".join(label(g.node[k], k) for k in [*cycle, cycle[0]])
                raise DlaError(NvError.BadValue, f"the graph has a cycle: {path} (an ONNX graph is acyclic)")
            later = producer[name]
            raise DlaError(NvError.BadValue, f"{label(n, i)}: input '{printable(name)}' is the output of a "
                                             f"later node, {label(g.node[later], later)}: an ONNX graph "
                                             "lists its nodes in topological order")
        known.update(outputs)
    for o in g.output:
        if o.name not in known:
            raise DlaError(NvError.BadValue, f"output '{printable(o.name)}' is not computed by any node")


def _cycle(ios: list[tuple[list[str], list[str]]], producer: dict[str, int], start: int) -> list[int]:
    """The nodes of a cycle through the producers of node ``start``'s inputs (in data-flow order),
    or [] when none: a depth-first walk, iterative (a long chain must not exhaust the stack)."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    path: list[int] = []
    stack: list[tuple[int, int]] = [(start, 0)]
    while stack:
        node, k = stack.pop()
        if k == 0:
            if state.get(node) == 2:
                continue
            state[node] = 1
            path.append(node)
        inputs = ios[node][0]
        while k < len(inputs) and inputs[k] not in producer:
            k += 1
        if k == len(inputs):
            state[node] = 2
            path.pop()
            continue
        stack.append((node, k + 1))
        nxt = producer[inputs[k]]
        if state.get(nxt) == 1:  # back on the path: nxt ... node is the cycle
            return path[path.index(nxt):][::-1]
        if state.get(nxt) != 2:
            stack.append((nxt, 0))
    return []


def check_attributes(model: onnx.ModelProto) -> None:
    """Every node's attributes against its operator's schema in the model's opsets: known names, the
    declared types, the required ones present (onnx's per-node check; a misspelled attribute would
    otherwise be ignored and its default used). Operators without a schema are left to the
    compiler, which says it does not support them."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = max(model.ir_version, 3)
    opsets = {"" if o.domain == "ai.onnx" else o.domain: o.version for o in model.opset_import}
    ctx.opset_imports = opsets
    scope = onnx.checker.C.LexicalScopeContext()
    for i, n in enumerate(model.graph.node):
        domain = "" if n.domain == "ai.onnx" else n.domain
        if domain not in opsets or not onnx.defs.has(n.op_type, opsets[domain], domain):
            if domain in opsets and onnx.defs.has(n.op_type, domain):
                since = _first_opset(n.op_type, domain)
                raise DlaError(NvError.BadValue,
                               f"{label(n, i)}: {n.op_type} is not an operator of the model's opset "
                               f"{opsets[domain]} (it first appears in opset {since})")
            continue
        try:
            onnx.checker.check_node(n, ctx, scope)
        except onnx.checker.ValidationError as e:
            raise DlaError(NvError.BadValue, f"{label(n, i)}: {first_line(e)}") from Detail(str(e))


@functools.cache
def _first_opset(op_type: str, domain: str) -> int:
    """The opset in which ``op_type`` first appears."""
    return min(s.since_version for s in onnx.defs.get_all_schemas_with_history()
               if s.name == op_type and s.domain == domain)


def upgraded(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A model of an opset before MIN_OPSET, converted to MIN_OPSET by onnx's version converter
    (the semantics pydla lowers: Pad's and Resize's inputs, Clip's bounds, ...)."""
    from onnx import version_converter

    for i, n in enumerate(model.graph.node):
        if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type):
            raise DlaError(NvError.NotSupported,
                           f"{label(n, i)}: {n.op_type} is not an ONNX operator (the model's opset "
                           f"{opset} is upgraded to {MIN_OPSET} first)")
    try:
        if opset < 1:
            raise ValueError("the model imports no ONNX opset")
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # the converter raises several types for what it cannot convert
        raise DlaError(NvError.NotSupported,
                       f"ONNX opset {opset}: pydla compiles opset {MIN_OPSET} and later, and onnx's version "
                       f"converter could not upgrade this model: {first_line(e)}") from Detail(str(e))


def check_type_constraints(g: onnx.GraphProto, opset: int, elem_types: dict[str, int]) -> None:
    """The inputs a node's schema binds to one type parameter (Gemm's A, B and C are all "T") have
    one element type, as onnxruntime requires; shape inference lets a float64 weight beside a
    float32 input through, and the compiler would quietly convert it."""
    for i, n in enumerate(g.node):
        if n.domain not in ("", "ai.onnx"):
            continue
        formal = _formal_inputs(n.op_type, opset)
        if not formal:
            continue
        bound: dict[str, tuple[str, int]] = {}
        for k, name in enumerate(n.input):
            if not name or name not in elem_types or not elem_types[name]:
                continue
            type_str, variadic = formal[min(k, len(formal) - 1)]
            if k >= len(formal) and not variadic:
                continue
            first = bound.setdefault(type_str, (name, elem_types[name]))
            if first[1] != elem_types[name]:
                types = [helper.tensor_dtype_to_string(t).removeprefix("TensorProto.").lower()
                         for t in (first[1], elem_types[name])]
                raise DlaError(NvError.BadValue,
                               f"{label(n, i)}: '{first[0]}' is {types[0]} and '{name}' is {types[1]}, but "
                               f"{n.op_type} takes one type for both ({type_str})")


@functools.cache
def _formal_inputs(op_type: str, opset: int) -> tuple[tuple[str, bool], ...]:
    """The type parameter of each formal input of ``op_type`` in ``opset`` and whether it is
    variadic; none for an operator without a schema there. Looked up once per operator: a schema
    lookup per node was a tenth of importing a large graph."""
    if not onnx.defs.has(op_type, opset):
        return ()
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    return tuple((p.type_str, p.option == variadic) for p in onnx.defs.get_schema(op_type, opset).inputs)
