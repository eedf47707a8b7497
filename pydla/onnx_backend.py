"""pydla as an ONNX backend (``onnx.backend.base.Backend``): prepare a model, run it through the
whole stack on the virtual device.

Usage::

    import pydla.onnx_backend as backend
    rep = backend.prepare(model)
    outputs = rep.run([x])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.session import Session

try:
    import onnx
    from onnx import helper
    from onnx.backend.base import Backend, BackendRep
except ImportError as e:  # one line saying what to install, not a traceback into onnx
    raise ImportError("pydla.onnx_backend is an ONNX backend: it needs the onnx extra: "
                      "pip install 'pydla[onnx]'") from e


class PydlaRep(BackendRep):
    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(values) != len(self.session.inputs):
                raise DlaError(NvError.BadParameter, f"{len(values)} inputs given, the model takes "
                                                     f"{len(self.session.inputs)}")
            feeds = {t.name: np.asarray(v) for t, v in zip(self.session.inputs, values, strict=True)}
        outputs = self.session.run(feeds)
        return tuple(outputs[t.name] for t in self.session.outputs)


class PydlaBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> PydlaRep:
        if not cls.supports_device(device):
            raise DlaError(NvError.NotSupported, f"device '{device}': pydla runs on 'CPU' (the virtual DLA)")
        return PydlaRep(Session(model, config=kwargs.get("config", "full")))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        rep = cls.prepare(model, device, **kwargs)
        try:
            return rep.run(inputs)
        finally:
            rep.session.close()

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Any = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        values = [np.asarray(v) for v in inputs]
        graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                        for name, v in zip(node.input, values, strict=False)]
        graph = helper.make_graph([node], "node", graph_inputs,
                                  [helper.make_tensor_value_info(o, 0, None) for o in node.output])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", kwargs.get("opset", 13))])
        return cls.run_model(model, values, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


prepare = PydlaBackend.prepare
run_model = PydlaBackend.run_model
run_node = PydlaBackend.run_node
supports_device = PydlaBackend.supports_device
