"""The operator tables of the CPU library contract: which operators a CPU run may name.

A loadable's CPU runs call functions of pydla's CPU library (``unary``, ``reduce``, ``compare``,
``argmax``, ...) and pass the ONNX operator as a string argument (``op``). The compiler emits only
these names, and the UMD's CPU library (``umd/cpumath.py``) implements exactly these, keyed by
them: both import these tables, neither imports the other.

Usage: ``"Erf" in UNARY_OPS``
"""

from __future__ import annotations

# ONNX's element-wise math on floats that SDP has no form for: ``unary(..., op, alpha, beta, ...)``.
# GeluTanh is Gelu with approximate="tanh" (not an ONNX operator name of its own).
UNARY_OPS: tuple[str, ...] = (
    "Exp", "Log", "Sqrt", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
    "Acosh", "Atanh", "Floor", "Ceil", "Round", "Sign", "Erf", "Softplus", "Softsign", "Elu", "Celu",
    "Selu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Mish", "Gelu", "GeluTanh",
)

# ONNX's reductions: ``reduce(..., op, ...)``, keeping the reduced axes as 1.
REDUCE_OPS: tuple[str, ...] = (
    "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
)
# The reductions of integer tensors (computed exactly, into the same type).
INTEGER_REDUCE_OPS: tuple[str, ...] = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")

# ONNX's comparisons and logic into a bool tensor: ``compare(..., op, ...)``.
COMPARE_OPS: tuple[str, ...] = (
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor",
)

# ``argmax(..., op, ...)``.
ARGMAX_OPS: tuple[str, ...] = ("ArgMax", "ArgMin")
