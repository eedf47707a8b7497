"""onnx's own backend test suite (``onnx.backend.test.BackendTest``) against ``pydla.onnx_backend``,
for the node cases of the operators pydla compiles.

Each case is a one-node ONNX model with onnx's inputs and reference outputs; the backend compiles it,
runs it through Session, the runtime, the portability layer and the KMD on the virtual device (or
pydla's CPU library for the CPU runs), and onnx compares the outputs (dtype exactly, values with the
case's own tolerances).

Run it alone with ``python -m pytest -q tests/test_onnx_backend_suite.py`` (about half a minute); the
excluded cases show as skipped, each with its reason. The cases are onnx's ``test_cases`` put into
this module's namespace (``enable_report()`` is left out: it only adds ``onnx_coverage`` marks for
onnx's coverage plugin, which this project does not use). Compiled loadables are cached in a
temporary directory, never in the user's cache.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import onnx.backend.test
import pytest

import pydla.onnx_backend

# The node cases of these operators, by their names in onnx's suite. The ``_expanded`` variants
# (the same operator decomposed into other operators, e.g. LeakyRelu into Less/Where/Mul) are not
# cases of these operators and are not selected.
OPERATORS = {
    "Conv": r"test_(basic_)?conv_with\w*",
    "ConvTranspose": r"test_convtranspose\w*",
    "MaxPool": r"test_maxpool_\w+",
    "AveragePool": r"test_averagepool_\w+",
    "GlobalAveragePool": r"test_globalaveragepool(_precomputed)?",
    "Relu": r"test_relu",
    "LeakyRelu": r"test_leakyrelu(_example|_default)?",
    "Clip": r"test_clip\w*",
    "Sigmoid": r"test_sigmoid(_example)?",
    "Tanh": r"test_tanh(_example)?",
    "Softmax": r"test_softmax_(example|large_number|axis_\d|negative_axis|default_axis)",
    "Add": r"test_add(_bcast|_u?int\d+)?",
    "Mul": r"test_mul(_example|_bcast|_u?int\d+)?",
    "Sub": r"test_sub(_example|_bcast|_u?int\d+)?",
    "Div": r"test_div(_example|_bcast|_u?int\d+(_trunc)?)?",
    "PRelu": r"test_prelu_\w+",
    "GlobalMaxPool": r"test_globalmaxpool(_precomputed)?",
    "LogSoftmax": r"test_logsoftmax_\w+",
    "Squeeze": r"test_squeeze(_negative_axes)?",
    "Unsqueeze": r"test_unsqueeze_\w+",
    "Identity": r"test_identity",
    "Dropout": r"test_dropout_\w+",
    "Max": r"test_max_\w+",
    "Min": r"test_min_\w+",
    "Sum": r"test_sum_\w+",
    "Mean": r"test_mean_\w+",
    "Gemm": r"test_gemm_\w+",
    "MatMul": r"test_matmul_\w+",
    "BatchNormalization": r"test_batchnorm_\w+",
    "Concat": r"test_concat_\w+",
    "Reshape": r"test_reshape_\w+",
    "Transpose": r"test_transpose_\w+",
    "Flatten": r"test_flatten_\w+",
    "LRN": r"test_lrn(_default)?",
    "Pad": r"test_(constant|edge|reflect|wrap)_pad\w*",
    "Resize": r"test_resize_\w+",
    "Split": r"test_split_(equal|variable|zero|1d|2d)\w*",
    "Slice": r"test_slice\w*",
    "Neg": r"test_neg(_example)?",
    "Abs": r"test_abs",
    "Reciprocal": r"test_reciprocal(_example)?",
    # Element-wise math SDP has no form for: CPU runs of pydla's CPU library.
    **{op: fr"test_{op.lower()}(_example|_default)?" for op in (
        "Exp", "Log", "Sqrt", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
        "Atanh", "Floor", "Ceil", "Round", "Sign", "Erf", "Softplus", "Softsign", "Elu", "Celu", "Selu",
        "ThresholdedRelu", "HardSigmoid", "HardSwish", "Mish")},
    "Gelu": r"test_gelu_(default|tanh)_\d",
    "Pow": r"test_pow\w*",
    # Comparisons, logic, Where, Cast and ArgMax / ArgMin: CPU runs.
    "Compare": r"test_(equal|less|greater)(_equal)?(_bcast|_u?int\d+)?",
    "Logic": r"test_(and|or|xor)(\dd|_bcast\dv\dd)|test_not_\dd",
    "Where": r"test_where_(long_)?example",
    "Cast": r"test_cast_(FLOAT_to_FLOAT16|FLOAT16_to_FLOAT)",
    "ArgMax": r"test_arg(max|min)_\w+",
    "Gather": r"test_gather_(\d|negative_indices)\w*",
    "Expand": r"test_expand_\w+",
    "Tile": r"test_tile\w*",
    "Reduce": r"test_reduce_(l1|l2|log_sum|log_sum_exp|max|mean|min|prod|sum|sum_square)_\w+",
}

# Cases outside what pydla does, each with its reason (a regex against the case name, as
# BackendTest.exclude takes it). Everything else selected above must pass.
EXCLUDED: dict[str, str] = {
    r"^test_batchnorm_(example|epsilon)_training_mode_cpu$":
        "training_mode=1 computes batch statistics and updates running averages: training, not inference",
}

SELECTED = re.compile(r"^(?:" + "|".join(f"(?:{p})" for p in OPERATORS.values()) + r")_cpu$")
NOT_EXPANDED = re.compile(r"_expanded")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # onnx's case generators warn about overflowing casts
    backend_test = onnx.backend.test.BackendTest(pydla.onnx_backend, __name__)
for pattern in EXCLUDED:
    backend_test.exclude(pattern)


def _node_cases() -> type:
    """onnx's node test case class with only the selected cases (other operators' cases dropped,
    not reported as thousands of skips)."""
    case = backend_test.test_cases["OnnxBackendNodeModelTest"]
    for name in [n for n in vars(case) if n.startswith("test_")]:
        if not SELECTED.match(name) or NOT_EXPANDED.search(name):
            delattr(case, name)
    return case


OnnxBackendNodeModelTest = _node_cases()


def test_every_operator_and_every_exclusion_names_cases() -> None:
    """No operator pattern selects nothing, and no exclusion is stale."""
    names = [n for n in vars(OnnxBackendNodeModelTest) if n.startswith("test_")]
    for op, pattern in OPERATORS.items():
        assert any(re.match(f"^(?:{pattern})_cpu$", n) for n in names), op
    for pattern in EXCLUDED:
        assert any(re.search(pattern, n) for n in names), pattern


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PYDLA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "pydla-cache"))
    yield
