"""Reading an ONNX model and the checks made on it as ONNX, before the compiler imports it: a file
that is no ONNX model, an empty model, names that are not defined, attributes against the operator
schemas, type constraints, and the upgrade of opsets before :data:`MIN_OPSET`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx
from onnx import helper

from pydla.elf.reader import ELF_MAGIC
from pydla.errors import DlaError, NvError

MIN_OPSET = 11


def load_model(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself, or the model in the file at that path; DlaError naming the file when it
    is missing, unreadable, or holds no ONNX model."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise DlaError(NvError.BadParameter,
                       f"a model is a path or an onnx.ModelProto, not {type(model).__name__}")
    path = Path(model)
    try:
        with path.open("rb") as f:
            head = f.read(len(ELF_MAGIC))
    except FileNotFoundError:
        raise DlaError(NvError.FileNotFound, f"{path}: no such file") from None
    except OSError as e:
        raise DlaError(NvError.FileReadFailed, f"{path}: cannot read it: {e.strerror or e}") from None
    if not head:
        raise DlaError(NvError.BadValue, f"{path}: the file is empty (0 bytes), not an ONNX model")
    if head == ELF_MAGIC:
        raise DlaError(NvError.BadValue, f"{path}: not an ONNX model: it is an ELF file (a compiled pydla "
                                         "loadable? `pydla run` and `pydla info` take those)")
    try:
        loaded = onnx.load(str(path))
    except OSError as e:  # external data that cannot be read
        raise DlaError(NvError.FileReadFailed, f"{path}: cannot read the ONNX model: {e}") from None
    except Exception as e:  # protobuf's DecodeError and onnx's own, for bytes that are no model
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DlaError(NvError.BadValue,
                       f"{path}: not an ONNX model (it does not parse as one: {detail})") from None
    check_not_empty(loaded, f"{path}: not an ONNX model: ")
    return loaded


def check_not_empty(model: onnx.ModelProto, prefix: str = "") -> None:
    """An empty ModelProto (what protobuf makes of 0 bytes, and of some bytes that are no model) has
    no graph and imports no opset: say so (the opset check would report "opset 0")."""
    g = model.graph
    if not model.opset_import and not (g.node or g.input or g.output or g.initializer):
        raise DlaError(NvError.BadValue, f"{prefix}the model is empty: it has no graph (no nodes, inputs or "
                                         "outputs) and no opset_import")


def label(n: onnx.NodeProto, i: int) -> str:
    """How messages name node ``i`` (as :meth:`Node.where` does once it is imported)."""
    return f"node '{n.name or f'{n.op_type}_{i}'}' ({n.op_type})"


def check_names(g: onnx.GraphProto) -> None:
    """Every node input is a graph input, an initializer or an earlier node's output (onnx's own
    checker also insists on declared output shapes, which models built with onnx.helper often lack)."""
    known = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    for i, n in enumerate(g.node):
        for name in n.input:
            if name not in known:
                raise DlaError(NvError.BadValue, f"{label(n, i)}: input '{name}' is not "
                                                 "a graph input, an initializer or an earlier node's output")
        known.update(n.output)
    for o in g.output:
        if o.name not in known:
            raise DlaError(NvError.BadValue, f"output '{o.name}' is not computed by any node")


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
            detail = str(e).strip().splitlines()[0]
            raise DlaError(NvError.BadValue, f"{label(n, i)}: {detail}") from None


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
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DlaError(NvError.NotSupported,
                       f"ONNX opset {opset}: pydla compiles opset {MIN_OPSET} and later, and onnx's version "
                       f"converter could not upgrade this model: {detail}") from None


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
