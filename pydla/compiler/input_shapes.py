"""Dynamic dimensions fixed at compile time: ``--input-shape NAME=1,128`` / ``input_shapes=``.

Exporters leave the batch and sequence dimensions symbolic (torch.onnx's ``dynamic_axes``, tf2onnx's
``unk__N``). A loadable has static shapes, so each symbolic dimension of a graph input is given a
size when compiling: the model's input types are rewritten to the sizes given, and every other
declared shape (outputs, value_info) has its symbolic dimensions replaced by the size of the same
name, or forgotten (fixed sizes too: they are the exporter's example's), and the intermediate tensors'
recorded shapes are dropped, so that shape inference computes them from the inputs instead of
merging with stale declarations.

Messages quote the shapes as the caller gave them: ``--input-shape x=1,0`` for the command line's,
``input_shapes['x'] = (1, 0)`` for the API's (:class:`GivenShapes` carries which).

Usage::

    shapes = parse_input_shapes(["input_ids=1,128", "attention_mask=1,128"])
    model = with_input_shapes(model, shapes)      # a copy; the original is left as it was
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydla.errors import DlaError, NvError

if TYPE_CHECKING:  # onnx is imported where a model is rewritten: running a .dla needs no onnx extra
    import onnx

InputShapes = dict[str, tuple[int, ...]]

FLAG = "--input-shape"
PARAMETER = "input_shapes"


class GivenShapes(dict[str, tuple[int, ...]]):
    """Input shapes and how the caller gave them, ``named``: :data:`FLAG` (the command line) or
    :data:`PARAMETER` (the API), so that every message about them quotes what the caller wrote.
    :func:`parse_input_shapes` and :func:`check_input_shapes` make them; passed on as a dict, they
    keep the name to the compiler."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]] | None = None, *,
                 named: str = PARAMETER) -> None:
        super().__init__(shapes or {})
        self.named = named


def quoted(named: str | None, name: str, dims: tuple[int, ...] | None = None) -> str:
    """Input ``name``'s shape as the caller wrote it: ``--input-shape x=1,128`` or
    ``input_shapes['x'] = (1, 128)`` (without ``dims``: ``--input-shape x``, ``input_shapes['x']``)."""
    if named == FLAG:
        return f"{FLAG} {name}" + ("" if dims is None else f"={','.join(map(str, dims))}")
    return f"{PARAMETER}['{name}']" + ("" if dims is None else f" = {dims}")


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D0,D1,...`` (the command line's form) as (name, dims). The name is what precedes the
    last '=', so a name holding '=' still works; dims are positive integers ('x' also separates
    them: ``1x128``)."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name or not dims.strip():
        raise DlaError(NvError.BadParameter, f"{FLAG} {text!r}: write NAME=D0,D1,... (e.g. input_ids=1,128)")
    parts = [p.strip() for p in dims.replace("x", ",").split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise DlaError(NvError.BadParameter, f"{FLAG} {text!r}: the dimensions {dims!r} are not integers "
                                             "separated by commas (e.g. input_ids=1,128)") from None
    return name, _positive(name, values, FLAG)


def parse_input_shapes(items: Iterable[str]) -> GivenShapes:
    """Several ``NAME=D0,D1,...``; the same name twice is refused."""
    shapes = GivenShapes(named=FLAG)
    for item in items:
        name, dims = parse_input_shape(item)
        if name in shapes:
            raise DlaError(NvError.BadParameter, f"{FLAG} {name}: given twice ({shapes[name]} and {dims})")
        shapes[name] = dims
    return shapes


def check_input_shapes(value: Any) -> GivenShapes:
    """``input_shapes`` as the API takes it: None, or a mapping {input name: sequence of positive
    ints}; returned as a dict of tuples (a cache key and the compiler read the same thing), named
    as ``value`` is when it is :class:`GivenShapes` (the command line's, passed on), else as the
    API's parameter."""
    named = value.named if isinstance(value, GivenShapes) else PARAMETER
    if value is None:
        return GivenShapes(named=named)
    if not isinstance(value, Mapping):
        raise DlaError(NvError.BadParameter, f"input_shapes of type {type(value).__name__}: give a dict "
                                             "{input name: shape}, e.g. {'input_ids': (1, 128)}")
    shapes = GivenShapes(named=named)
    for name, dims in value.items():
        if not isinstance(name, str):
            raise DlaError(NvError.BadParameter, f"input_shapes: key {name!r} is not an input name (a str)")
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
            raise DlaError(NvError.BadParameter, f"input_shapes['{name}'] = {dims!r}: give a tuple of "
                                                 "positive ints, e.g. (1, 128)")
        items = list(dims)
        if not all(_is_int(d) for d in items):
            raise DlaError(NvError.BadParameter, f"input_shapes['{name}'] = {items!r}: every dimension "
                                                 "must be an int")
        shapes[name] = _positive(name, tuple(int(d) for d in items), named)
    return shapes


def _is_int(d: Any) -> bool:
    return not isinstance(d, bool) and hasattr(d, "__index__")


def _positive(name: str, dims: tuple[int, ...], named: str) -> tuple[int, ...]:
    bad = [d for d in dims if d < 1]
    if bad:
        raise DlaError(NvError.BadParameter, f"{quoted(named, name, dims)}: dimension {bad[0]} "
                                             "is not positive (each is a size of 1 or more)")
    return dims


def batch_of_one(dims: Sequence[int | str | None] | None) -> tuple[int, ...] | None:
    """The shape to use for an input whose only dynamic dimension is its first (a model exported
    with a dynamic batch): batch 1; None for any other shape (nothing to guess: the caller asks).
    The command line uses it, as trtexec does, saying so (:func:`batch_note`); the API never guesses."""
    if not dims or isinstance(dims[0], int) or not all(isinstance(d, int) for d in dims[1:]):
        return None
    return (1, *(int(d) for d in dims[1:] if isinstance(d, int)))


def batch_note(name: str, dims: Sequence[int | str | None], verb: str) -> str:
    """What the command line says when it uses :func:`batch_of_one` (``verb``: "running",
    "compiling")."""
    rest = "".join(f",{d}" for d in dims[1:])
    return (f"input '{name}' {_show(list(dims))}: {verb} with batch 1, its only dynamic dimension "
            f"({FLAG} {name}=N{rest} for another)")


def cache_text(shapes: InputShapes) -> str:
    """The shapes as one canonical line, for a cache key: ``a=1,128;b=1,128`` (sorted by name)."""
    return ";".join(f"{n}={','.join(map(str, d))}" for n, d in sorted(shapes.items()))


def _dims(vi: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """A declared tensor shape: ints, dim_param names, None for a dimension with neither; None
    when no shape is declared (not even the rank)."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _symbolic(d: int | str | None) -> bool:
    """A dimension without a size: a dim_param name, or neither a name nor a value."""
    return not isinstance(d, int)


def _example(dims: list[int | str | None] | None) -> list[str]:
    """The sizes a message suggests: the fixed ones, 1 for a symbolic first (batch) dimension, the
    others by their names (a CNN's H and W: 1 would be no image), for the caller to fill in."""
    if dims is None:
        return ["D0", "D1", "..."]
    return [str(d) if isinstance(d, int) else "1" if axis == 0 else (d or f"D{axis}")
            for axis, d in enumerate(dims)]


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds (not those that are also initializers, as older exporters list)."""
    inits = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def with_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """``model`` with the given input sizes in place of its symbolic dimensions (a copy when any
    changes). Refused, naming the input and the flag: a name that is no input, a rank other than
    the declared one, a size other than a fixed one, and any symbolic dimension left without a size.
    Messages quote ``shapes`` as the caller gave them (:class:`GivenShapes`; a plain mapping is
    the API's, and a message asking for shapes then shows both forms)."""
    named = shapes.named if isinstance(shapes, GivenShapes) else None
    inputs = graph_inputs(model)
    for vi in inputs:
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":  # a sequence, map or optional: no shape to give, and no loadable tensor
            raise DlaError(NvError.NotSupported, f"input '{vi.name}' is of type {kind or 'none'}: pydla "
                                                 "compiles tensor inputs")
    by_name = {vi.name: vi for vi in inputs}
    unknown = sorted(set(shapes) - set(by_name))
    if unknown:
        raise DlaError(NvError.BadParameter, f"{quoted(named, unknown[0])}: the model has no input "
                                             f"'{unknown[0]}' (its inputs: {', '.join(by_name) or 'none'})")
    sizes: dict[str, int] = {}  # dim_param -> the size given for it
    for name, given in shapes.items():
        declared = _dims(by_name[name])
        if declared is None:
            continue
        if len(declared) != len(given):
            raise DlaError(NvError.BadParameter,
                           f"{quoted(named, name, given)}: {len(given)} dimensions, but input "
                           f"'{name}' has {len(declared)} ({_show(declared)})")
        for axis, (d, g) in enumerate(zip(declared, given, strict=True)):
            if isinstance(d, int) and d != g:
                raise DlaError(NvError.BadParameter,
                               f"{quoted(named, name, given)}: dimension {axis} of input "
                               f"'{name}' is fixed at {d} in the model ({_show(declared)}), not {g}")
            if isinstance(d, str) and sizes.setdefault(d, g) != g:
                raise DlaError(NvError.BadParameter,
                               f"{quoted(named, name)}: dimension {axis} is '{d}', given {sizes[d]} "
                               f"elsewhere and {g} here (one symbolic dimension has one size)")
    missing = []
    for vi in inputs:
        declared = _dims(vi)
        if vi.name in shapes:
            continue
        if declared is None:
            missing.append(f"input '{vi.name}' declares no shape")
        elif any(_symbolic(d) for d in declared):
            missing.append(f"input '{vi.name}' {_show(declared)} has dynamic dimensions")
    if missing:
        todo = [(vi.name, _example(_dims(vi))) for vi in inputs if vi.name not in shapes and _needs_shape(vi)]
        examples = " ".join(f"{FLAG} {name}={','.join(dims)}" for name, dims in todo)
        pairs = ", ".join(f"'{name}': ({', '.join(dims)}{',' if len(dims) == 1 else ''})"
                          for name, dims in todo)
        parameter = f"input_shapes={{{pairs}}}"
        both = f"{examples} (pydla compile / pydla run), or {parameter} (pydla.Session, compile_model)"
        ask = {FLAG: examples, PARAMETER: parameter}.get(named or "", both)
        names = sorted({d for _, dims in todo for d in dims if not d.isdigit() and d != "..."})
        fill = f" ({', '.join(names)}: the sizes to compile for)" if names else ""
        raise DlaError(NvError.BadParameter,
                       f"{'; '.join(missing)}: a loadable has static shapes, so give each such input's "
                       f"sizes: {ask}{fill}")
    if not shapes:
        return model
    import onnx

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    g = fixed.graph
    for vi in g.input:
        if vi.name in shapes:
            _set_dims(vi, list(shapes[vi.name]))
    # The shapes an exporter recorded for intermediate tensors and outputs were traced with its
    # example input: fixed there (an output left out of torch's dynamic_axes keeps the example's
    # batch), they may contradict the sizes given now, and shape inference, which is strict, would
    # refuse the model where onnxruntime only warns. They are inferred again instead; an output keeps
    # the sizes of the symbolic names it shares with the inputs.
    del g.value_info[:]
    for vi in g.output:
        declared = _dims(vi)
        if declared is not None:
            _set_dims(vi, [sizes.get(d) if isinstance(d, str) else None for d in declared])
    return fixed


def batch_defaults(model: onnx.ModelProto,
                   shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """For each input not in ``shapes`` whose only dynamic dimension is its first: its shape with batch
    1 (:func:`batch_of_one`)."""
    found = {}
    for vi in graph_inputs(model):
        sizes = batch_of_one(_dims(vi)) if vi.name not in shapes else None
        if sizes is not None:
            found[vi.name] = sizes
    return found


def declared(vi: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """An input's declared shape: sizes, dim_param names, None for a dimension with neither."""
    return _dims(vi)


def _needs_shape(vi: onnx.ValueInfoProto) -> bool:
    declared = _dims(vi)
    return declared is None or any(_symbolic(d) for d in declared)


def _show(dims: list[int | str | None]) -> str:
    """A declared shape as every message shows one (``pydla.model_info.show``): ``[batch, 3, 32, 32]``."""
    return "[" + ", ".join(str(d) if isinstance(d, int) else d if d else "?" for d in dims) + "]"


def _set_dims(vi: onnx.ValueInfoProto, dims: list[int | None]) -> None:
    shape = vi.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if d is not None:
            dim.dim_value = d
