"""Fuzzing the compiler's reader of ONNX graphs (the ``onnx`` target of :mod:`pydla.testing.fuzz`).

A case starts from one of a few small valid networks built with onnx.helper and either changes its
graph (structured mutations: a tensor produced twice, a cycle or nodes out of order, an opset or IR
version out of range, a string that is not UTF-8, an initializer contradicting its graph input, an
operator of an unknown domain, names holding control characters, attribute values, input shapes,
operators, dropped nodes), or changes bytes of the serialized model (:func:`pydla.testing.fuzz.mutate`),
or both. The model is then compiled and, if that succeeds, run through the whole stack and compared
with onnxruntime. A case passes when

- the compiler refuses it with a :class:`~pydla.errors.DlaError` whose message is one printable line;
  a model made invalid on purpose must be refused (accepting it is a ``silent`` finding);
- or it compiles and its outputs match onnxruntime's (rtol 1e-3, atol 1e-4), where onnxruntime runs it.

The campaign hands the target small *case descriptors*, not models: a descriptor's first byte picks
the kind (structured, bytes, both), its second the network, and the rest seeds the mutations, so the
campaign's byte edits of a descriptor make a new case each time and the same descriptor always
rebuilds the same model: :func:`case_model` gives it (what a finding's ``data`` reproduces).

Usage::

    report = run_campaign([onnx_target()], cases=2000, seed=1)
    model_bytes, done, invalid = case_model(report.findings[0].data)
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pydla.errors import DlaError
from pydla.testing.fuzz import SilentDifference, Target, mutate

KINDS = ("structured", "bytes", "structured+bytes")
OPSETS = (13, 17)
BAD_OPSETS = (0, -1, 9999, 2**31 - 1)
BAD_IR_VERSIONS = (0, -3, 99, 2**40)
INTS = (-3, -1, 0, 1, 2, 3, 5, 100)
FLOATS = (-1.0, 0.0, 0.5, 1e30, float("nan"))
OPS = ("Relu", "Sigmoid", "Add", "Mul", "MaxPool", "Conv", "Softmax", "Transpose", "Concat", "Flatten",
       "Exp", "ReduceMean", "Identity", "Clip", "Gather", "Frobnicate")
CONTROL_NAMES = ("a\nb", "\x1b[31mred", "tab\there", "nul\x00name", "\u2028sep", "\x7f")


class MessageNotOneLine(Exception):
    """A DlaError whose message holds a line break or a control character."""


def base_models() -> list[onnx.ModelProto]:
    """Five small valid networks (convolution, residual, classifier head, data movement, element-wise
    arithmetic), each run by onnxruntime and by pydla alike."""
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def make(nodes: list[Any], inits: dict[str, np.ndarray], shape: tuple[int, ...],
             opset: int) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        weights = [numpy_helper.from_array(v, k) for k, v in inits.items()]
        graph = helper.make_graph(nodes, "fuzz", [x], [y], weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)

    node = helper.make_node
    return [
        make([node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
              node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"]), node("Relu", ["n"], ["r"]),
              node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
             {"w": w(4, 3, 3, 3), "b": w(4), "g": w(4), "be": w(4), "m": w(4), "v": np.abs(w(4)) + 0.5},
             (1, 3, 8, 8), 13),
        make([node("Conv", ["x", "dw"], ["d"], pads=[1, 1, 1, 1], group=3), node("Add", ["d", "x"], ["a"]),
              node("Clip", ["a", "lo", "hi"], ["y"])],
             {"dw": w(3, 1, 3, 3), "lo": np.array(-1, np.float32), "hi": np.array(2, np.float32)},
             (1, 3, 6, 6), 13),
        make([node("GlobalAveragePool", ["x"], ["p"]), node("Flatten", ["p"], ["f"]),
              node("Gemm", ["f", "fc", "fb"], ["g"], transB=1), node("Softmax", ["g"], ["y"], axis=1)],
             {"fc": w(5, 3), "fb": w(5)}, (1, 3, 4, 4), 17),
        make([node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), node("Concat", ["t", "t"], ["c"], axis=1),
              node("Reshape", ["c", "s"], ["r"]), node("Sigmoid", ["r"], ["y"])],
             {"s": np.array([1, -1, 4], np.int64)}, (1, 3, 4, 4), 13),
        make([node("Mul", ["x", "k"], ["m"]), node("Sub", ["m", "x"], ["s"]), node("Div", ["s", "d"], ["q"]),
              node("ReduceMean", ["q", "axes"], ["y"], keepdims=1)],
             {"k": w(1, 3, 1, 1), "d": np.abs(w(4)) + 1, "axes": np.array([1], np.int64)}, (1, 3, 2, 4), 18),
    ]


BASES = base_models()


def seeds() -> list[bytes]:
    """One descriptor for each kind and network."""
    return [bytes([kind, base]) + random.Random(f"{kind}:{base}").randbytes(14)
            for kind in range(len(KINDS)) for base in range(len(BASES))]


def case_model(data: bytes) -> tuple[bytes, list[str], bool]:
    """The serialized model descriptor ``data`` stands for, what was done to it, and whether it was
    made invalid on purpose (a model the compiler must refuse)."""
    kind = KINDS[data[0] % len(KINDS)] if data else KINDS[0]
    base = BASES[data[1] % len(BASES)] if len(data) > 1 else BASES[0]
    rng = random.Random(bytes(data[2:]))
    done: list[str] = []
    invalid = False
    model_bytes = base.SerializeToString()
    if kind != "bytes":
        model_bytes, done, invalid = structured(rng, base)
    if kind != "structured":
        model_bytes = mutate(rng, model_bytes)
        done.append("bytes edited")
        try:  # the edits may have broken a rule, or mended the one broken on purpose
            invalid = breaks_rules(onnx.load_from_string(model_bytes))
        except Exception:  # bytes that do not parse: refused, as nothing else can be done with them
            invalid = False
    return model_bytes, done, invalid


def structured(rng: random.Random, base: onnx.ModelProto) -> tuple[bytes, list[str], bool]:
    """One to three changes of ``base``'s graph: the serialized model, what was done, and whether one
    of the changes makes the model invalid by ONNX's rules."""
    m = onnx.ModelProto()
    m.CopyFrom(base)
    utf8: list[str] = []  # markers whose bytes become invalid UTF-8 once serialized
    done = [_change(rng, m, utf8) for _ in range(rng.randint(1, 3))]
    data = m.SerializeToString()
    not_text = False
    for marker in utf8:  # the same length, so every length prefix stays right
        not_text |= marker.encode() in data  # (a later change may have dropped its node)
        data = data.replace(marker.encode(), b"\xff" + rng.randbytes(len(marker) - 2) + b"\xc3")
    return data, done, not_text or breaks_rules(m)


def breaks_rules(m: onnx.ModelProto) -> bool:
    """Whether ``m`` breaks a rule of ONNX that pydla must refuse a model for (the oracle of the
    structured mutations, written apart from the compiler's checks): a name defined twice, a node
    reading a name not defined before it, an IR version or opset out of range, a graph input whose
    initializer has another type or shape, a node of a domain other than ONNX's."""
    g = m.graph
    default = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    return (not 1 <= m.ir_version <= onnx.IR_VERSION or any(o.version < 1 for o in m.opset_import)
            or any(v > onnx.defs.onnx_opset_version() for v in default) or _defined_twice(g)
            or not _topological(g) or _initializer_conflict(g)
            or any(n.domain not in ("", "ai.onnx") for n in g.node))


def _change(rng: random.Random, m: onnx.ModelProto, utf8: list[str]) -> str:
    """One change of ``m``: what was done."""
    g = m.graph
    nodes = list(g.node)
    node = rng.choice(nodes)
    names = [t for n in nodes for t in n.output] + [i.name for i in g.initializer] + [i.name for i in g.input]
    kind = rng.choice(["duplicate", "duplicate", "cycle", "order", "opset", "ir", "utf8", "initializer",
                       "domain", "control", "value", "input", "shape", "op", "drop"])
    if kind == "duplicate":
        target = rng.choice([t for t in names if t not in node.output])
        node.output[0] = target
        return f"{node.op_type} output -> '{target}' (defined twice)"
    if kind == "cycle":
        i = nodes.index(node)
        later = [t for n in nodes[i:] for t in n.output]
        node.input[rng.randrange(len(node.input))] = rng.choice(later)
        return f"{node.op_type} reads a later or its own output (a cycle)"
    if kind == "order" and len(nodes) > 1:
        order = list(range(len(nodes)))
        while order == sorted(order):
            rng.shuffle(order)
        del g.node[:]
        g.node.extend(nodes[i] for i in order)
        return f"nodes in order {order}"
    if kind == "opset":
        bad = rng.random() < 0.7
        version = rng.choice(BAD_OPSETS) if bad else rng.choice((11, 13, 17, onnx.defs.onnx_opset_version()))
        m.opset_import[0].version = version
        return f"opset {version}"
    if kind == "ir":
        bad = rng.random() < 0.7
        m.ir_version = rng.choice(BAD_IR_VERSIONS) if bad else rng.choice((3, 7, onnx.IR_VERSION))
        return f"ir_version {m.ir_version}"
    if kind == "utf8":
        marker = f"utf8mark{len(utf8)}{rng.randrange(10**6):06d}"
        field = rng.choice(["name", "op_type", "domain"])
        setattr(node, field, marker)
        utf8.append(marker)
        return f"{node.op_type} {field} not UTF-8"
    if kind == "initializer" and g.initializer:
        init = rng.choice(list(g.initializer))
        if rng.random() < 0.5:
            dims = [d + 1 for d in init.dims] or [2]
            g.input.append(helper.make_tensor_value_info(init.name, init.data_type, dims))
        else:
            other = TensorProto.DOUBLE if init.data_type != TensorProto.DOUBLE else TensorProto.FLOAT
            g.input.append(helper.make_tensor_value_info(init.name, other, list(init.dims)))
        return f"graph input '{init.name}' of another shape or type than its initializer"
    if kind == "domain":
        node.domain = "com.fuzz"
        if rng.random() < 0.5:
            m.opset_import.append(helper.make_opsetid("com.fuzz", 1))
        return f"{node.op_type} in domain com.fuzz"
    if kind == "control":
        node.name = rng.choice(CONTROL_NAMES)
        return f"{node.op_type} named {node.name!r}"
    if kind == "value" and node.attribute:
        a = rng.choice(list(node.attribute))
        value = _attribute_value(rng, a)
        node.attribute.remove(a)
        node.attribute.append(helper.make_attribute(a.name, value))
        return f"{node.op_type}.{a.name} = {value!r}"
    if kind == "input" and node.input:
        i = rng.randrange(len(node.input))
        node.input[i] = rng.choice([*names, "nowhere"])
        return f"{node.op_type} input {i} -> '{node.input[i]}'"
    if kind == "shape":
        dims = g.input[0].type.tensor_type.shape.dim
        d = rng.randrange(len(dims))
        dims[d].dim_value = rng.choice([1, 2, 5, 9])
        return f"input dim {d} -> {dims[d].dim_value}"
    if kind == "op":
        before, node.op_type = node.op_type, rng.choice(OPS)
        return f"{before} -> {node.op_type}"
    if kind == "drop" and len(nodes) > 1:
        g.node.remove(node)
        return f"drop {node.op_type}"
    return "unchanged"


def _attribute_value(rng: random.Random, a: onnx.AttributeProto) -> Any:
    if a.type == onnx.AttributeProto.INT:
        return rng.choice(INTS)
    if a.type == onnx.AttributeProto.FLOAT:
        return rng.choice(FLOATS)
    if a.type == onnx.AttributeProto.INTS:
        return [rng.choice(INTS) for _ in range(rng.choice([len(a.ints), len(a.ints), 1, 3]))]
    return rng.choice(INTS)


def _defined_twice(g: onnx.GraphProto) -> bool:
    inits = {i.name for i in g.initializer}
    names = [i.name for i in g.input] + [i for i in inits if i not in {v.name for v in g.input}]
    names += [o for n in g.node for o in n.output if o]
    return len(names) != len(set(names))


def _initializer_conflict(g: onnx.GraphProto) -> bool:
    inits = {i.name: i for i in g.initializer}
    for vi in g.input:
        init = inits.get(vi.name)
        t = vi.type.tensor_type
        if init is None or not vi.type.HasField("tensor_type"):
            continue
        if t.elem_type and t.elem_type != init.data_type:
            return True
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if t.HasField("shape") and (len(dims) != len(init.dims) or any(
                d is not None and d != s for d, s in zip(dims, init.dims, strict=False))):
            return True
    return False


def _topological(g: onnx.GraphProto) -> bool:
    known = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    for n in g.node:
        if any(i not in known for i in n.input):
            return False
        known.update(n.output)
    return True


# -- the check ------------------------------------------------------------------------------------


def check_case(data: bytes) -> None:
    """Compile the model ``data`` describes: a DlaError of one printable line, or a model that runs
    as onnxruntime runs it; a model made invalid on purpose must be refused."""
    from pydla.compiler.api import compile_model
    from pydla.compiler.onnx_model import parse_model

    model_bytes, done, invalid = case_model(data)
    try:
        blob = compile_model(parse_model(model_bytes, "fuzzed model")).blob
    except DlaError as e:
        if not e.message.isprintable():
            raise MessageNotOneLine(f"{done}: {e.message!r}") from None
        raise
    if invalid:
        raise SilentDifference(f"an invalid model was compiled ({'; '.join(done)})")
    _compare(model_bytes, blob, data, done)


def _compare(model_bytes: bytes, blob: bytes, data: bytes, done: list[str]) -> None:
    import onnxruntime as ort  # type: ignore[import-untyped]

    from pydla.session import Session
    from pydla.testing.fuzz_readers import sample

    rng = np.random.default_rng(list(data))
    with Session(blob) as sess:
        feeds = {t.name: sample(rng, t.sizes, t.dtype) for t in sess.inputs}
        got = sess.run(feeds)
    options, quiet = ort.SessionOptions(), ort.RunOptions()
    # Its warnings (an initializer listed as an input) and errors (a model it does not run) are not
    # findings: only what it computes is.
    options.log_severity_level = quiet.log_severity_level = 4
    try:
        ref = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        want = ref.run(None, feeds, quiet)
    except Exception:
        return  # onnxruntime does not run it either: nothing to compare with
    nan_free: bool | None = None
    for out, value in zip(ref.get_outputs(), want, strict=True):
        ours = got.get(out.name)
        value = np.asarray(value)
        if ours is None or ours.shape != value.shape or ours.dtype != value.dtype:
            shown = None if ours is None else (ours.dtype, ours.shape)
            raise SilentDifference(f"output {out.name!r}: pydla {shown}, onnxruntime "
                                   f"{(value.dtype, value.shape)} ({'; '.join(done)})")
        if nan_free is None:
            nan_free = not _non_finite_constants(onnx.load_from_string(model_bytes))
        close = np.isclose(ours, value, rtol=1e-3, atol=1e-4, equal_nan=True)
        if not nan_free and ours.dtype.kind == "f":
            # Constants a mutation made NaN, infinite or huge: ONNX leaves NaN in a max or min
            # unspecified (onnxruntime's pooling skips a NaN that is not first in its window, the
            # device's propagates it), and where float32 overflows depends on the order of the
            # arithmetic (a batch norm folded into the weights, or applied after). The outputs must
            # agree wherever both are finite numbers of a size float32 computes.
            with np.errstate(all="ignore"):
                close |= ~(np.abs(ours) < 1e30) | ~(np.abs(value) < 1e30)
        if not close.all():
            raise SilentDifference(f"output {out.name!r} differs from onnxruntime's ({'; '.join(done)})")


def _non_finite_constants(m: onnx.ModelProto) -> bool:
    """Whether a float initializer, or a float attribute (a Constant's tensor too), is NaN or
    infinite, or so large (1e18 or more) that arithmetic on it may overflow float32."""
    values = [numpy_helper.to_array(t) for t in m.graph.initializer]
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                values.append(numpy_helper.to_array(a.t))
            elif a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.FLOATS):
                values.append(np.array([a.f, *a.floats], np.float64))
    with np.errstate(all="ignore"):
        return any(v.dtype.kind == "f" and v.size and not (np.abs(v.astype(np.float64)) < 1e18).all()
                   for v in values)


def onnx_target() -> Target:
    """The ONNX graph reader and compiler, compared with onnxruntime (see the module's docstring)."""
    return Target("onnx", seeds(), check_case)
