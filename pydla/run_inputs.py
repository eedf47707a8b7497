"""The inputs of ``pydla run``: ``--input`` files (.npy arrays, named or, for a one-input model, not),
random ones for the rest, and integers drawn from what the model can index (an input of indices of a
Gather is drawn within the axis it indexes), or a note saying which input needs a file.

Usage (by :mod:`pydla.run`)::

    given = read_inputs(["x=img.npy"])             # [("x", array, "img.npy")]
    limits = index_limits(onnx_model)               # {"input_ids": 30522}
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError, file_error
from pydla.model_info import TensorInfo

NPY_MAGIC = b"\x93NUMPY"
CHUNK = 1 << 20  # random values drawn at once: ~5 ms, the longest Ctrl-C waits for in random_input
INT_LOW, INT_HIGH = -100, 100  # integers of an input that indexes nothing the model says (0..200 unsigned)

# Operators whose output holds the values of their first input (rearranged or retyped): an index
# stays an index through them.
_PASS_THROUGH = frozenset({"Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose",
                           "Expand", "Tile", "Slice", "Concat"})


def read_inputs(items: list[str]) -> list[tuple[str | None, np.ndarray, str]]:
    """``--input`` values: ``NAME=FILE.npy``, or ``FILE.npy`` alone (a file that exists, or text
    without '='); each read as a .npy array (name None when not given)."""
    found = []
    for item in items:
        name: str | None
        if "=" in item and not os.path.exists(item):
            name, _, file = item.partition("=")
            if not name or not file:
                raise DlaError(NvError.BadParameter, f"--input {item!r}: write NAME=FILE.npy (or FILE.npy "
                                                     "for a model of one input)")
        else:
            name, file = None, item
        found.append((name, read_npy(file, f"--input {item}"), file))
    return found


def read_npy(file: str, label: str) -> np.ndarray:
    """The array in .npy file ``file``; anything else refused, saying what it is instead. ``label``:
    the argument as the user wrote it (``--input x=img.npy``), which messages start with."""
    path = Path(file)
    try:
        with path.open("rb") as f:
            head = f.read(len(NPY_MAGIC))
    except OSError as e:
        raise file_error(label, e) from None
    if not head:
        raise DlaError(NvError.BadValue, f"{label}: the file is empty (0 bytes), not a .npy array")
    if head != NPY_MAGIC:
        if path.suffix.lower() == ".onnx":
            why = ("an ONNX model, not a .npy array: the model is pydla run's first argument; --input takes "
                   "arrays saved with numpy.save")
        elif head[:2] == b"PK":
            why = "a .npz archive, not a .npy array: save each input with numpy.save"
        else:
            why = "not a .npy array file (numpy.save writes those)"
        raise DlaError(NvError.BadValue, f"{label} is {why}")
    try:
        array: np.ndarray = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DlaError(NvError.FileReadFailed, f"{label}: not a readable .npy array: {e}") from None
    return array


def name_inputs(given: list[tuple[str | None, np.ndarray, str]],
                inputs: list[TensorInfo]) -> dict[str, tuple[np.ndarray, str]]:
    """The ``--input`` arrays by input name: an unnamed one is a one-input model's input."""
    names = [t.name for t in inputs]
    by_name: dict[str, tuple[np.ndarray, str]] = {}
    for name, array, file in given:
        if name is None:
            if len(names) != 1:
                raise DlaError(NvError.BadParameter,
                               f"--input {file}: the model has {len(names)} inputs ({', '.join(names)}): "
                               "name the one this file is, --input NAME=FILE.npy")
            name = names[0]
        if name not in names:
            raise DlaError(NvError.BadParameter, f"--input {name}: the model has no input '{name}' "
                                                 f"(its inputs: {', '.join(names)})")
        if name in by_name:
            raise DlaError(NvError.BadParameter,
                           f"--input {name}: given twice ({by_name[name][1]} and {file})")
        by_name[name] = (array, file)
    return by_name


def shape_needed(t: TensorInfo) -> DlaError:
    """The error for a dynamic input given neither a file nor a shape: what to write, with the
    model's fixed sizes, 1 for a first (batch) dimension, and the other dynamic ones by name."""
    dims, unknown = [], []
    for axis, d in enumerate(t.shape):
        if isinstance(d, int) or axis == 0:
            dims.append(str(d) if isinstance(d, int) else "1")
        else:
            unknown.append(d or f"D{axis}")
            dims.append(unknown[-1])
    fill = f" ({', '.join(unknown)}: the sizes to run with)" if unknown else ""
    shown = "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
    return DlaError(NvError.BadParameter,
                    f"input '{t.name}' {shown} has dynamic dimensions: give its data, whose shape is taken, "
                    f"with --input {t.name}=FILE.npy, or its shape, "
                    f"--input-shape {t.name}={','.join(dims)}{fill}")


def random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any],
                 limit: int | None = None) -> np.ndarray:
    """A random tensor of ``dtype``: values a network of that type can take without overflowing at
    once (floats standard normal; integers in -100..100, or 0..200 unsigned; in 0..limit-1 for
    indices of an axis of ``limit``; bools half true). Drawn in the target type (never a float64 copy
    of a large input) and in chunks of :data:`CHUNK` values, so that Ctrl-C is answered within one
    chunk's time however large the input."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        part = flat[start:start + CHUNK]
        if dtype == np.bool_:
            part[...] = rng.random(part.size, np.float32) < 0.5
        elif dtype.kind in "iu" and limit is not None:
            part[...] = rng.integers(0, limit, part.size, dtype=dtype)
        elif dtype.kind in "iu":
            low = 0 if dtype.kind == "u" else INT_LOW
            part[...] = rng.integers(low, low + INT_HIGH - INT_LOW, part.size, dtype=dtype, endpoint=True)
        elif dtype in (np.float32, np.float64):
            rng.standard_normal(part.size, dtype, out=part)
        else:  # float16: drawn as float32
            part[...] = rng.standard_normal(part.size, np.float32)
    return out


def index_limits(model: Any) -> dict[str, int]:
    """For each graph input of ``model`` (an onnx.ModelProto) whose values index an axis (the
    indices of a Gather or GatherElements, directly or through reshapes and casts; the indices of a
    OneHot): the axis' size, the smallest where it indexes several."""
    g = model.graph
    sizes: dict[str, list[int | None]] = {i.name: list(i.dims) for i in g.initializer}
    for vi in [*g.input, *g.value_info, *g.output]:
        shape = vi.type.tensor_type.shape if vi.type.HasField("tensor_type") else None
        if vi.name not in sizes and shape is not None and vi.type.tensor_type.HasField("shape"):
            sizes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]
    scalars = {i.name: i for i in g.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in g.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    limits: dict[str, int] = {}
    inits = {i.name for i in g.initializer}
    for graph_input in (i.name for i in g.input if i.name not in inits):
        seen, todo = {graph_input}, [graph_input]
        found: list[int | None] = []
        while todo:
            tensor = todo.pop()
            for node in consumers.get(tensor, []):
                if node.op_type in _PASS_THROUGH and node.input and node.input[0] == tensor:
                    todo.extend(o for o in node.output if o not in seen)
                    seen.update(node.output)
                elif node.op_type in ("Gather", "GatherElements") and node.input[1:2] == [tensor]:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    data = sizes.get(node.input[0])
                    if data and -len(data) <= axis < len(data):
                        found.append(data[axis])
                elif node.op_type == "OneHot" and node.input[0] == tensor and len(node.input) > 1:
                    found.append(_scalar(scalars.get(node.input[1])))
        known = [int(n) for n in found if isinstance(n, int) and n > 0]
        if known:
            limits[graph_input] = min(known)
    return limits


def _scalar(tensor: Any) -> int | None:
    """The integer an initializer holds (None when it holds no one integer, or its data is in an
    external file, not read here)."""
    if tensor is None:
        return None
    from onnx import numpy_helper

    try:
        values = np.asarray(numpy_helper.to_array(tensor)).reshape(-1)
    except Exception:  # external data, a type numpy lacks: no limit known
        return None
    return int(values[0]) if values.size == 1 and values.dtype.kind in "iuf" else None


def output_file_name(name: str) -> str:
    """A tensor name as a file name: characters other than letters, digits, '.', '_' and '-' (the
    '/' and ':' of exported names, a '..') become '_', so every output lands in the output directory."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return safe or "_"
