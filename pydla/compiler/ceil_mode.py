"""Pooling with ``ceil_mode``: the window that would start in the end padding does not exist.

ONNX opset 22 says so, and onnx's reference implementation and onnxruntime drop that window at
every opset; but onnx's shape inference before opset 22 counts it (MaxPool, k=1, s=2, ceil_mode on
8 pixels: inference says 5, both implementations compute 4). pydla takes shapes from shape
inference, so such a node is rewritten before it: where the dropped window is the one ceil_mode
adds, the node is the same pooling with ``ceil_mode`` 0, and every shape after it comes out right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from onnx import helper

from pydla.errors import DlaError, NvError

POOLS = ("MaxPool", "AveragePool", "LpPool")


FIXED_OPSET = 22  # from here shape inference drops the window too


def floor_nodes(graph: onnx.GraphProto, shapes: Mapping[str, Sequence[int]], opset: int) -> list[int]:
    """Indices of the pooling nodes of ``graph`` whose ``ceil_mode`` adds only windows that start in
    the end padding (so ``ceil_mode`` 0 computes them), given the ``shapes`` known (-1: unknown)."""
    if opset >= FIXED_OPSET:
        return []
    found = []
    for i, n in enumerate(graph.node):
        if n.op_type not in POOLS or n.domain not in ("", "ai.onnx") or not n.input:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        if not attrs.get("ceil_mode", 0) or auto_pad not in (b"NOTSET", "NOTSET", b"", ""):
            continue
        shape = shapes.get(n.input[0])
        if shape is None or len(shape) < 3 or min(shape) < 1:
            continue  # not known yet (known after folding: asked again then)
        if _only_padding_windows(n, attrs, list(shape[2:])):
            found.append(i)
    return found


def _only_padding_windows(node: onnx.NodeProto, attrs: dict[str, Any], spatial: list[int]) -> bool:
    nd = len(spatial)
    kernel = list(attrs.get("kernel_shape", []))
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * 2 * nd))
    if not (len(kernel) == len(strides) == len(dilations) == nd and len(pads) == 2 * nd):
        return False  # malformed: the lowering names what is wrong
    extra_only = []  # per axis: ceil_mode's extra window exists and starts in the end padding
    for axis, size in enumerate(spatial):
        span = (kernel[axis] - 1) * dilations[axis] + 1
        stride = strides[axis]
        room = size + pads[axis] + pads[axis + nd] - span
        if room < 0 or stride < 1:
            return False
        if room % stride == 0:
            continue  # ceil and floor agree on this axis
        ceil_count = room // stride + 2
        extra_only.append((ceil_count - 1) * stride >= size + pads[axis])
    if not any(extra_only):
        return False
    if not all(extra_only):
        name = node.name or node.op_type
        raise DlaError(NvError.NotSupported,
                       f"node '{name}' ({node.op_type}): ceil_mode adds a window that starts in the end "
                       "padding on some axes and one that does not on others; onnx's shape inference "
                       "before opset 22 gets its shape wrong (export with opset 22, or without ceil_mode)")
    return True


def without_padding_windows(graph: onnx.GraphProto, indices: list[int]) -> onnx.GraphProto:
    """A copy of ``graph`` with ``ceil_mode`` 0 on the nodes at ``indices``, and without the shapes
    recorded for its intermediate tensors and outputs (an earlier shape inference may have stored
    wrong ones there: they are inferred again; the caller keeps a declared output shape that cannot
    be inferred)."""
    fixed = onnx.GraphProto()
    fixed.CopyFrom(graph)
    del fixed.value_info[:]
    for output in fixed.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    for i in indices:
        for a in fixed.node[i].attribute:
            if a.name == "ceil_mode":
                a.i = 0
    return fixed
