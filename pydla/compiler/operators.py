"""The ONNX operators pydla's compiler takes, in one place: the step grouping dispatches on these
tables, and the import refuses any other operator by name before it asks for static shapes (an
operator whose output shape depends on the data, such as NonMaxSuppression, would otherwise be
reported as a shape that is not static).
"""

from __future__ import annotations

from pydla.loadable.cpuops import ARGMAX_OPS, COMPARE_OPS, REDUCE_OPS, UNARY_OPS
from pydla.logconfig import printable

ACTIVATIONS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "PRelu", "HardSigmoid"}
# Element-wise functions SDP computes in more than one operation (HardSwish: its gate as a lookup
# table, then the product), on the device's float types; on others they are CPU runs.
SDP_COMPOSITES = {"HardSwish"}
ELTWISE = {"Add", "Sub", "Mul", "Div", "Max", "Min"}
ALIASES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
# Element-wise math SDP has no form for: CPU runs of pydla's CPU library (Gelu's tanh form is its
# own entry there). The CPU library's operator tables are the contract's (pydla.loadable.cpuops).
CPU_UNARY = set(UNARY_OPS) - {"GeluTanh"}
PRODUCTS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
# Operators with a step of their own (see pydla.compiler.plan.group_steps).
OWN_STEPS = {"BatchNormalization", "LRN", "Concat", "Transpose", "Softmax", "LogSoftmax", "Gather",
             "Expand", "Tile", "Where", "Cast", "Pow", "Slice", "Pad", "Resize", "Split"}
# A kernel author's SHAVE kernel: ONNX domain ai.pydla's ShaveKernel, as the import names it
# (pydla.compiler.custom_kernel); not an ONNX operator, so not in SUPPORTED.
SHAVE_KERNEL = "ai.pydla.ShaveKernel"
# Operators the import rewrites into the ones above (pydla.compiler.graph._rewrite), and those it
# only ever evaluates while folding constants (Constant; Shape and Size of a tensor of static shape).
REWRITTEN = {"Sum", "Mean", "Neg", "Abs", "Reciprocal", "Not", "LayerNormalization", "Constant", "Shape",
             "Size"}

SUPPORTED: frozenset[str] = frozenset(
    ACTIVATIONS | SDP_COMPOSITES | ELTWISE | ALIASES | POOLS | CPU_UNARY | PRODUCTS | OWN_STEPS | REWRITTEN
    | set(REDUCE_OPS) | set(COMPARE_OPS) | set(ARGMAX_OPS))


def unsupported(op_type: str) -> str:
    """What the error for an operator outside :data:`SUPPORTED` says after naming the node."""
    return (f"the {printable(op_type)} operator is not supported: neither the device nor pydla's CPU library "
            f"computes it (supported: {', '.join(sorted(SUPPORTED))})")
