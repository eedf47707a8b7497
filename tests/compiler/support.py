"""Running a compiled loadable through the whole stack, and building one-node and small ONNX models
to compare against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NotImplementedByOrt

from pydla.session import Session


def run_loadable(blob: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a compiled loadable through the whole stack (Session -> runtime -> runner -> port -> KMD)."""
    with Session(blob) as sess:
        return sess.run({name: np.ascontiguousarray(v, dtype=np.float32) for name, v in feeds.items()})


def model(nodes: list[Any], inputs: dict[str, tuple[int, ...]], outputs: list[str],
          inits: dict[str, np.ndarray] | None = None, opset: int = 13) -> Any:
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k)
         for k, v in (inits or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def reference(m: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs by onnxruntime; by onnx's reference implementation where this
    onnxruntime has no kernel for an operator and type (older releases lack int8 Max, for one)."""
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except NotImplementedByOrt:
        evaluator = ReferenceEvaluator(m)
        return dict(zip(evaluator.output_names, evaluator.run(None, feeds), strict=True))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))
