"""Why each CPU run exists: every CPU run splits the NPU work (a task ends, the CPU computes, the
next task starts), so the loadable says which node made it and why the device could not take it.
The compiler writes the list into the recipe header's metadata as ``cpu_runs``
(``[{"index", "function", "node", "op", "why"}]``, index into ``execution.runs``); ``pydla info``
prints it.
"""

from __future__ import annotations

from typing import Any

HEADER_KEY = "cpu_runs"

# Per CPU library function: why the node is computed there (the node's operator is named beside it).
WHY: dict[str, str] = {
    "softmax": "the device has no exponential and no sum along an axis",
    "log_softmax": "the device has no exponential and no sum along an axis",
    "unary": "SDP has no form for this function (its lookup table is not used for it yet)",
    "reduce": "the device reduces only by pooling over the spatial axes",
    "pow": "an exponent other than 1, 2, 0.5 or -1 everywhere",
    "compare": "it makes a bool tensor; the device computes floating point",
    "where": "it selects by a bool tensor; the device computes floating point",
    "cast": "a change of element type; the device computes floating point",
    "argmax": "it makes int64 indices; the device computes floating point",
    "gather": "it indexes by values known only at run time",
    "expand": "a broadcast copy the device's copies do not express",
    "tile": "a repeated copy the device's copies do not express",
    "slice": "its parameters arrive at run time, or it has a negative step",
    "pad_nd": "its pads arrive at run time, or its mode is reflect, edge or wrap",
    "resize_nd": "its parameters arrive at run time, or its mode is not nearest by whole factors",
    "resize_filtered": "cubic or antialiased resizing",
    "pool": "pooling with dilations",
    "maxpool_indices": "MaxPool's Indices output",
    "batchnorm_params": "batch-norm parameters given at run time, folded into SDP's scale and shift",
    "eltwise_int": "integer arithmetic; the device computes floating point",
    "clip_int": "integer arithmetic; the device computes floating point",
    "eltwise": "arithmetic of the model's float64 or float16 tensors, kept in their own type",
}


def note(function: str, node: Any, index: int) -> dict[str, Any]:
    """The header entry of CPU run ``index`` (its position in execution.runs), for ``node``."""
    return {"index": index, "function": function, "node": getattr(node, "name", ""),
            "op": getattr(node, "op_type", ""), "why": WHY.get(function, "no device form")}
