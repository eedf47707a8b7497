"""What a :class:`pydla.Session` says of its model before running it: the inputs and outputs (name,
shape, dtype; a dimension an exporter left symbolic is its name, as onnxruntime shows it), the
model's metadata (onnxruntime's ``ModelMetadata``), and the check of arrays fed to a model whose
input dimensions are dynamic.

Usage::

    inputs, outputs = declared_io(onnx_model, {})      # [TensorInfo('x', ('batch', 3, 32, 32), float32)]
    shapes = feed_shapes(inputs, {"x": x})             # {"x": (2, 3, 32, 32)}: the sizes to compile for
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.compiler.input_shapes import PARAMETER, GivenShapes, InputShapes, quoted
from pydla.errors import DlaError, NvError

# The metadata a loadable keeps of its model lives with the loadable (the compiler writes it, Session
# reads it); its names stay importable from here, where pydla.ModelMetadata was first documented.
from pydla.loadable.metadata import (
    MODEL_KEY,
    UNVERSIONED,
    ModelMetadata,
    loadable_metadata,
    model_header,
    onnx_metadata,
)

__all__ = ["MODEL_KEY", "UNVERSIONED", "Dim", "ModelMetadata", "TensorInfo", "declared_io", "feed_shapes",
           "loadable_metadata", "model_header", "onnx_metadata", "show"]

# A dimension: its size, or for a dynamic one the name the model gives it (None when unnamed).
Dim = int | str | None


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as :attr:`Session.inputs` lists it: name, shape, numpy dtype. A
    dimension is an int; in a model with dynamic axes (not yet given sizes) it is the symbolic
    dimension's name, or None when it has none, as onnxruntime's ``get_inputs()`` shows it.

    Usage: ``[(t.name, t.shape) for t in sess.inputs]`` -> ``[("input", ("batch", 3, 32, 32))]``
    """

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype[Any]

    @functools.cached_property
    def dynamic(self) -> bool:
        """Whether a dimension has no size yet (it takes the size of the array a run is given)."""
        return any(not isinstance(d, int) for d in self.shape)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The shape, every dimension a size (DlaError InvalidState while one is dynamic)."""
        sizes = tuple(d for d in self.shape if isinstance(d, int))
        if len(sizes) != len(self.shape):
            raise DlaError(NvError.InvalidState, f"'{self.name}' of shape {show(self.shape)}: its dynamic "
                                                 "dimensions take their sizes at a run")
        return sizes



def declared_io(model: Any, shapes: InputShapes, *,
                outputs: bool = True) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The inputs a caller feeds and (with ``outputs``) the outputs of ``model`` (an
    onnx.ModelProto) as declared, each input given in ``shapes`` with those sizes (checked against
    its declaration); the outputs' types and shapes inferred where the model does not declare them,
    as onnxruntime does."""
    from onnx import helper, shape_inference

    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    named = shapes.named if isinstance(shapes, GivenShapes) else PARAMETER
    unknown = sorted(set(shapes) - {vi.name for vi in inputs})
    if unknown:
        raise DlaError(NvError.BadParameter, f"{quoted(named, unknown[0])}: the model has no input "
                                             f"'{unknown[0]}' (its inputs: "
                                             f"{', '.join(vi.name for vi in inputs) or 'none'})")
    results = list(model.graph.output) if outputs else []
    if any(not _declares(vi) for vi in results):
        try:  # onnx's inference fills in what the exporter left out, symbolic names kept
            inferred = shape_inference.infer_shapes(model, strict_mode=False)
            results = list(inferred.graph.output)
        except Exception:  # the compile reports what is wrong with the model
            pass
    found = []
    for kind, infos in (("input", inputs), ("output", results)):
        described = []
        for vi in infos:
            tensor = vi.type.tensor_type
            if vi.type.WhichOneof("value") != "tensor_type" or not tensor.elem_type:
                what = vi.type.WhichOneof("value") or "no type"
                raise DlaError(NvError.NotSupported, f"{kind} '{vi.name}' is of type {what}: pydla runs "
                                                     "tensors of a declared element type")
            try:
                dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
            except Exception:
                dtype = np.dtype(object)
            if dtype.kind not in "biuf":
                raise DlaError(NvError.NotSupported, f"{kind} '{vi.name}' has element type "
                                                     f"{helper.tensor_dtype_to_string(tensor.elem_type)}: "
                                                     "pydla runs numeric and bool tensors")
            dims: tuple[Dim, ...] = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
            if kind == "input" and vi.name in shapes:
                dims = _given(vi.name, dims if tensor.HasField("shape") else None, shapes[vi.name], named)
            elif kind == "input" and not tensor.HasField("shape"):
                how = (f"{quoted(named, vi.name)}=D0,D1,..." if named != PARAMETER
                       else f"input_shapes={{'{vi.name}': (D0, D1, ...)}}")
                raise DlaError(NvError.NotSupported, f"input '{vi.name}' declares no shape (not even its "
                                                     f"rank): give it with {how}")
            described.append(TensorInfo(vi.name, dims, dtype))
        found.append(described)
    return found[0], found[1]


def _declares(vi: Any) -> bool:
    tensor = vi.type.tensor_type
    return (vi.type.WhichOneof("value") == "tensor_type" and bool(tensor.elem_type)
            and tensor.HasField("shape"))


def _given(name: str, declared: tuple[Dim, ...] | None, given: tuple[int, ...],
           named: str = PARAMETER) -> tuple[int, ...]:
    """``given`` as input ``name``'s shape, once it agrees with the declared one; messages quote it
    as the caller gave it (``named``: the command line's flag or the API's parameter)."""
    text = quoted(named, name, given)
    if declared is None:
        return given
    if len(declared) != len(given):
        raise DlaError(NvError.BadParameter, f"{text}: {len(given)} dimensions, but input '{name}' has "
                                             f"{len(declared)} ({show(declared)})")
    for axis, (d, g) in enumerate(zip(declared, given, strict=True)):
        if isinstance(d, int) and d != g:
            raise DlaError(NvError.BadParameter, f"{text}: dimension {axis} of input '{name}' is fixed at "
                                                 f"{d} in the model ({show(declared)}), not {g}")
    return given


def show(dims: tuple[Dim, ...]) -> str:
    """A declared shape for a message: ``[batch, 3, 32, 32]`` (``?`` for an unnamed dimension)."""
    return "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"


def feed_shapes(inputs: list[TensorInfo], arrays: Mapping[str, np.ndarray]) -> InputShapes:
    """The sizes a run of a model with dynamic axes is for: each dynamic input's array shape, once
    each agrees with its declaration (rank, fixed sizes) and a symbolic dimension has one size in
    every input that names it. ``arrays`` has the dtypes already checked."""
    sizes: dict[str, tuple[int, str]] = {}
    shapes: InputShapes = {}
    for t in inputs:
        a = arrays[t.name]
        if len(a.shape) != len(t.shape):
            raise DlaError(NvError.BadParameter,
                           f"input '{t.name}': expected {t.dtype} of shape {show(t.shape)} (rank "
                           f"{len(t.shape)}), got {a.dtype} of shape {a.shape}")
        for axis, (d, g) in enumerate(zip(t.shape, a.shape, strict=True)):
            if isinstance(d, int) and d != g:
                raise DlaError(NvError.BadParameter,
                               f"input '{t.name}': expected {t.dtype} of shape {show(t.shape)}, got shape "
                               f"{a.shape}: dimension {axis} is fixed at {d}")
            if isinstance(d, str):
                size, where = sizes.setdefault(d, (g, t.name))
                if size != g:
                    raise DlaError(NvError.BadParameter,
                                   f"inputs: dimension '{d}' is {size} in input '{where}' and {g} in input "
                                   f"'{t.name}' (one symbolic dimension has one size)")
            if not isinstance(d, int) and g == 0:
                raise DlaError(NvError.NotSupported,
                               f"input '{t.name}': dimension {axis} ({d or 'unnamed'}) of size 0: a dynamic "
                               "dimension runs with sizes of 1 or more")
        if t.dynamic:
            shapes[t.name] = tuple(int(g) for g in a.shape)
    return shapes
