"""The rules of ONNX's graph that onnx's checker and onnxruntime enforce and the compiler relies on,
checked before anything else reads the model:

- every string is UTF-8 text (protobuf hands a string field that is not as ``bytes``);
- ``ir_version`` and the default domain's opset lie in the range this onnx knows, each domain is
  imported once, at a version of 1 or more;
- every tensor name is defined once (a graph input, an initializer, or one node's output: single
  static assignment), and an initializer that is also a graph input has the declared type and shape;
- every node belongs to a domain the model imports, and to one pydla compiles (ONNX's own, or
  pydla's custom SHAVE kernels).

Each refusal is a :class:`~pydla.errors.DlaError` naming the node or tensor and the value.

Usage::

    ios = check_model_rules(model)      # before the node checks of pydla.compiler.onnx_model
    check_names(model.graph, ios)
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

import onnx
from onnx import helper

from pydla.errors import DlaError, NvError
from pydla.logconfig import printable

ONNX_DOMAINS = ("", "ai.onnx")
# pydla.compiler.custom_kernel.DOMAIN, kept apart: that module imports the ELF and kernel tools.
PYDLA_DOMAIN = "ai.pydla"
MIN_IR_VERSION = 1


# Each node's inputs and outputs, as lists: reading a repeated field out of protobuf costs more than
# a check of its names, so it is done once for every check that walks them.
NodeNames = list[tuple[list[str], list[str]]]


def node_names(g: onnx.GraphProto) -> NodeNames:
    return [(list(n.input), list(n.output)) for n in g.node]


def check_model_rules(model: onnx.ModelProto) -> NodeNames:
    """Every rule of this module, in the order that lets each message name things as text; returns
    each node's inputs and outputs (:data:`NodeNames`), for :func:`check_names` to take."""
    ios = node_names(model.graph)
    check_text(model, ios)
    check_versions(model)
    check_single_assignment(model.graph, ios)
    check_initializer_inputs(model.graph)
    check_domains(model)
    return ios


def node_label(n: onnx.NodeProto, i: int) -> str:
    """How messages name node ``i`` (as :meth:`Node.where` does once it is imported)."""
    name = n.name or f"{n.op_type}_{i}"
    op = f"{n.domain} {n.op_type}" if n.domain not in ONNX_DOMAINS else n.op_type
    return f"node '{printable(name)}' ({printable(op)})"


# -- UTF-8 -----------------------------------------------------------------------------------------


def check_text(model: onnx.ModelProto, ios: NodeNames | None = None) -> None:
    """Every name the compiler reads is text: the opsets' domains; the graph's inputs, outputs,
    value_info and initializers; each node's name, operator, domain, inputs, outputs and attribute
    names. DlaError naming the field's path (``graph.node[3].op_type``) and the bytes otherwise.
    (A string elsewhere, a doc_string say, is never read; a subgraph's, never compiled.)"""
    g = model.graph
    ios = node_names(g) if ios is None else ios
    nodes = list(g.node)
    strings = [(o.domain for o in model.opset_import),
               (item.name for field in (g.input, g.output, g.value_info, g.initializer) for item in field),
               (n.name for n in nodes), (n.op_type for n in nodes), (n.domain for n in nodes),
               chain.from_iterable(inputs + outputs for inputs, outputs in ios),
               (a.name for n in nodes if n.attribute for a in n.attribute)]
    if all(_all_text(part) for part in strings):  # the common case, at C speed
        return
    for i, o in enumerate(model.opset_import):
        _text(o.domain, f"model.opset_import[{i}].domain")
    for field in ("input", "output", "value_info", "initializer"):
        for i, item in enumerate(getattr(g, field)):
            _text(item.name, f"model.graph.{field}[{i}].name")
    for i, n in enumerate(nodes):
        where = f"model.graph.node[{i}]"
        for field in ("name", "op_type", "domain"):
            _text(getattr(n, field), f"{where}.{field}")
        for field, names in zip(("input", "output"), ios[i], strict=True):
            for k, name in enumerate(names):
                _text(name, f"{where}.{field}[{k}]")
        for k, a in enumerate(n.attribute):
            _text(a.name, f"{where}.attribute[{k}].name")


def _all_text(strings: Iterable[str | bytes]) -> bool:
    try:
        "".join(strings)  # type: ignore[arg-type]  # a bytes item is what it looks for
    except TypeError:
        return False
    return True


def _text(value: str | bytes, path: str) -> None:
    """Protobuf hands a string field holding bytes that are not UTF-8 as ``bytes``."""
    if type(value) is not str:
        raise DlaError(NvError.BadValue, f"{path} {value!r}: not UTF-8 text (ONNX strings are UTF-8; "
                                         "the model is corrupt or was written by a faulty tool)")


# -- versions --------------------------------------------------------------------------------------


def check_versions(model: onnx.ModelProto) -> None:
    """``ir_version`` in 1..onnx.IR_VERSION; each domain imported once, at version 1 or more; the
    default domain's opset at most the newest this onnx (and so pydla's compiler) knows."""
    newest_ir = onnx.IR_VERSION
    if model.ir_version < MIN_IR_VERSION:
        raise DlaError(NvError.BadValue, f"ir_version {model.ir_version}: the model does not set its IR "
                                         f"version (ONNX's are {MIN_IR_VERSION} to {newest_ir} as this onnx "
                                         f"{onnx.__version__} knows them)")
    if model.ir_version > newest_ir:
        raise DlaError(NvError.NotSupported, f"ir_version {model.ir_version}: newer than this onnx "
                                             f"{onnx.__version__} reads (IR versions {MIN_IR_VERSION} to "
                                             f"{newest_ir}); export the model for IR version {newest_ir} or "
                                             "earlier, or upgrade onnx")
    seen: dict[str, int] = {}
    for o in model.opset_import:
        domain = "" if o.domain == "ai.onnx" else o.domain
        shown = f"'{printable(o.domain)}'" if o.domain else "'' (ONNX)"
        if domain in seen:
            raise DlaError(NvError.BadValue, f"opset_import: domain {shown} is imported twice (versions "
                                             f"{seen[domain]} and {o.version})")
        seen[domain] = o.version
        if o.version < 1:
            raise DlaError(NvError.BadValue, f"opset_import: domain {shown} version {o.version}: opset "
                                             "versions start at 1")
    newest = onnx.defs.onnx_opset_version()
    if seen.get("", 0) > newest:
        raise DlaError(NvError.NotSupported,
                       f"ONNX opset {seen['']}: the newest opset this onnx {onnx.__version__} (and so pydla) "
                       f"knows is {newest}; export the model for opset {newest} or earlier")


# -- names -----------------------------------------------------------------------------------------


def check_single_assignment(g: onnx.GraphProto, ios: NodeNames | None = None) -> None:
    """Each tensor name defined once: graph inputs, initializers and node outputs are distinct (an
    initializer may also be listed as a graph input, as older exporters do), as onnx's checker
    (single static assignment) and onnxruntime ("Duplicate definition of name") require."""
    # What defines each name, as (kind, node index): worded only for a message.
    defined: dict[str, tuple[str, int]] = {}

    def define(name: str, what: tuple[str, int]) -> None:
        if name in defined:
            first, second = _definer(g, defined[name]), _definer(g, what)
            raise DlaError(NvError.BadValue, f"tensor '{printable(name)}' is defined twice: {first} and "
                                             f"{second} (an ONNX graph defines each name once)")
        defined[name] = what

    for vi in g.input:
        define(vi.name, ("input", 0))
    inputs = {vi.name for vi in g.input}
    for init in g.initializer:
        if init.name in inputs:  # the input's default value: one definition
            defined[init.name] = ("input with an initializer", 0)
            inputs.discard(init.name)  # a second initializer of the same name is a duplicate
        else:
            define(init.name, ("initializer", 0))
    for i, (_, outputs) in enumerate(node_names(g) if ios is None else ios):
        for name in outputs:
            if name:
                define(name, ("node", i))


def _definer(g: onnx.GraphProto, what: tuple[str, int]) -> str:
    kind, i = what
    if kind == "node":
        return f"the output of {node_label(g.node[i], i)}"
    return "an initializer" if kind == "initializer" else f"a graph {kind}"


def check_initializer_inputs(g: onnx.GraphProto) -> None:
    """A graph input that is also an initializer (its default value) has the initializer's element
    type and shape where it declares them, as onnxruntime requires ("Shape of initializer x does not
    match")."""
    inits = {init.name: init for init in g.initializer}
    for vi in g.input:
        init = inits.get(vi.name)
        if init is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        t = vi.type.tensor_type
        name = printable(vi.name)
        if t.elem_type and t.elem_type != init.data_type:
            declared, actual = (_type_name(e) for e in (t.elem_type, init.data_type))
            raise DlaError(NvError.BadValue, f"graph input '{name}' is declared {declared}, but its "
                                             f"initializer is {actual}")
        if not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        shape = list(init.dims)
        if len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims, shape, strict=True)):
            shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
            raise DlaError(NvError.BadValue, f"graph input '{name}' is declared of shape {shown}, but its "
                                             f"initializer has shape {shape}")


def _type_name(elem_type: int) -> str:
    try:
        return helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()
    except (KeyError, ValueError):
        return f"element type {elem_type}"


# -- domains ---------------------------------------------------------------------------------------


def check_domains(model: onnx.ModelProto) -> None:
    """Every node's domain is imported by the model (pydla's own excepted, which it knows), and is
    one pydla compiles: ONNX's operators, or a custom SHAVE kernel of domain ai.pydla."""
    imported = {"" if o.domain == "ai.onnx" else o.domain for o in model.opset_import}
    for i, n in enumerate(model.graph.node):
        domain = "" if n.domain == "ai.onnx" else n.domain
        if domain == PYDLA_DOMAIN:
            continue
        if domain not in imported:
            which = f"domain '{printable(n.domain)}'" if n.domain else "the ONNX domain ''"
            raise DlaError(NvError.BadValue, f"{node_label(n, i)}: the model imports no opset of {which} "
                                             "(its opset_import lacks it)")
        if domain:
            raise DlaError(NvError.NotSupported,
                           f"{node_label(n, i)}: operator '{printable(n.op_type)}' of domain "
                           f"'{printable(n.domain)}' is not one pydla knows: it compiles ONNX's operators "
                           f"(domain '') and custom SHAVE kernels (domain '{PYDLA_DOMAIN}')")
