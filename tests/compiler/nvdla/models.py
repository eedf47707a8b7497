"""Small float CNNs made with onnx's helpers (random weights), their QDQ versions made with
onnxruntime.quantization, and calibration data: for the INT8 NVDLA back end's tests and benches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """A float ONNX graph built layer by layer (NCHW, batch 1)."""

    def __init__(self, shape: tuple[int, int, int], seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0
        self.shape = shape
        self.channels = {"input": shape[0]}

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def _const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv(
        self,
        x: str,
        k: int,
        kernel: int = 3,
        stride: int = 1,
        pad: int | None = None,
        group: int = 1,
        relu: bool = True,
        relu6: bool = False,
    ) -> str:
        c = self.channels[x]
        name = self._name("conv")
        fan = c // group * kernel * kernel
        w = self.rng.normal(0, np.sqrt(2.0 / fan), (k, c // group, kernel, kernel))
        b = self.rng.normal(0, 0.1, k)
        p = kernel // 2 if pad is None else pad
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, self._const(name + "_w", w), self._const(name + "_b", b)],
                [name],
                name=name,
                kernel_shape=[kernel, kernel],
                strides=[stride] * 2,
                pads=[p] * 4,
                group=group,
            )
        )
        self.channels[name] = k
        out = name
        if relu6:
            out = self._name("relu6")
            self.nodes.append(
                helper.make_node(
                    "Clip",
                    [name, self._const(out + "_lo", np.array(0.0)), self._const(out + "_hi", np.array(6.0))],
                    [out],
                    name=out,
                )
            )
        elif relu:
            out = self._name("relu")
            self.nodes.append(helper.make_node("Relu", [name], [out], name=out))
        self.channels[out] = k
        return out

    def maxpool(self, x: str, kernel: int = 2, stride: int = 2, pad: int = 0) -> str:
        out = self._name("pool")
        self.nodes.append(
            helper.make_node(
                "MaxPool",
                [x],
                [out],
                name=out,
                kernel_shape=[kernel] * 2,
                strides=[stride] * 2,
                pads=[pad] * 4,
            )
        )
        self.channels[out] = self.channels[x]
        return out

    def avgpool(self, x: str, kernel: int = 2, stride: int = 2) -> str:
        out = self._name("avg")
        self.nodes.append(
            helper.make_node(
                "AveragePool", [x], [out], name=out, kernel_shape=[kernel] * 2, strides=[stride] * 2
            )
        )
        self.channels[out] = self.channels[x]
        return out

    def add(self, a: str, b: str, relu: bool = True) -> str:
        out = self._name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [out], name=out))
        self.channels[out] = self.channels[a]
        if relu:
            r = self._name("relu")
            self.nodes.append(helper.make_node("Relu", [out], [r], name=r))
            self.channels[r] = self.channels[a]
            return r
        return out

    def concat(self, *xs: str) -> str:
        out = self._name("cat")
        self.nodes.append(helper.make_node("Concat", list(xs), [out], name=out, axis=1))
        self.channels[out] = sum(self.channels[x] for x in xs)
        return out

    def head(self, x: str, classes: int) -> str:
        gap = self._name("gap")
        self.nodes.append(helper.make_node("GlobalAveragePool", [x], [gap], name=gap))
        flat = self._name("flat")
        self.nodes.append(helper.make_node("Flatten", [gap], [flat], name=flat, axis=1))
        c = self.channels[x]
        fc = "logits"
        w = self.rng.normal(0, np.sqrt(1.0 / c), (classes, c))
        b = self.rng.normal(0, 0.1, classes)
        self.nodes.append(
            helper.make_node(
                "Gemm", [flat, self._const("fc_w", w), self._const("fc_b", b)], [fc], name="fc", transB=1
            )
        )
        self.channels[fc] = classes
        return fc

    def model(self, out: str, out_dims: list[int] | None = None) -> onnx.ModelProto:
        c, h, w = self.shape
        dims = out_dims or [1, self.channels[out]]
        graph = helper.make_graph(
            self.nodes,
            "cnn",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, h, w])],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, dims)],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def small_cnn(seed: int = 0, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    """conv, pooling, residual add, relu, concat, global pooling, fully connected."""
    b = Builder((3, size, size), seed)
    x = b.conv("input", 16)
    x = b.maxpool(x)
    y = b.conv(x, 16)
    y = b.conv(y, 16, relu=False)
    x = b.add(x, y)
    p = b.conv(x, 8, kernel=1)
    q = b.conv(x, 8)
    x = b.concat(p, q)
    x = b.conv(x, 32, stride=2)
    return b.model(b.head(x, classes))


def images(n: int, shape: tuple[int, ...], seed: int = 1) -> list[np.ndarray]:
    """Inputs drawn like natural images normalised: smooth noise, mean 0, unit-ish variance."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = rng.normal(0, 1, (1, shape[0], max(shape[1] // 4, 1), max(shape[2] // 4, 1)))
        up = np.kron(base, np.ones((1, 1, 4, 4)))[:, :, : shape[1], : shape[2]]
        out.append((up + rng.normal(0, 0.3, (1, *shape))).astype(np.float32))
    return out


class _Reader:
    def __init__(self, data: list[np.ndarray]) -> None:
        self.it: Iterator[np.ndarray] = iter(data)

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self.it, None)
        return None if x is None else {"input": x}


def qdq_model(
    model: onnx.ModelProto,
    data: list[np.ndarray],
    path: Path,
    per_channel: bool = True,
    qoperator: bool = False,
    activation_uint8: bool = False,
) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime.quantization (static, min-max) over ``data``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    src = path.with_suffix(".float.onnx")
    onnx.save(model, src)
    if any(n.op_type == "BatchNormalization" for n in model.graph.node):
        # onnxruntime's pre-processing folds batch norms into their convolutions (as its quantizer
        # asks a user to run first)
        from onnxruntime.quantization.shape_inference import quant_pre_process

        folded = path.with_suffix(".pre.onnx")
        quant_pre_process(str(src), str(folded), skip_symbolic_shape=True)
        src = folded

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.r = _Reader(data)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.r.get_next()

    quantize_static(
        str(src),
        str(path),
        Reader(),
        quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
        per_channel=per_channel,
        activation_type=QuantType.QUInt8 if activation_uint8 else QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return onnx.load(path)


def quantized_tensors(model: onnx.ModelProto, names: list[str], shapes: list[tuple[int, ...]]) -> Any:
    """A function running the QDQ ``model`` in onnxruntime and returning, for each of ``names`` that
    the model quantizes (its QuantizeLinear output ``<name>_QuantizeLinear_Output``), the quantized
    tensor as pydla stores it (int64 (C, H, W); a uint8 one minus 128): the device's buffers of the
    same names are compared with these."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name: i.data_type for i in m.graph.initializer}
    quantized = {
        n.output[0]: inits.get(n.input[2], TensorProto.INT8) if len(n.input) > 2 else TensorProto.UINT8
        for n in m.graph.node
        if n.op_type == "QuantizeLinear"
    }
    outputs = {o.name for o in m.graph.output}
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, shape in zip(names, shapes, strict=True):
        t = name + "_QuantizeLinear_Output"
        if t in quantized and t not in outputs:
            found[name] = (t, shape)
            m.graph.output.append(helper.make_tensor_value_info(t, quantized[t], None))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    order = [o.name for o in session.get_outputs()]

    def run(x: np.ndarray) -> dict[str, np.ndarray]:
        got = dict(zip(order, session.run(None, {"input": x}), strict=True))
        out = {}
        for name, (t, shape) in found.items():
            v = got[t].astype(np.int64)
            out[name] = (v - 128 if got[t].dtype == np.uint8 else v).reshape(shape)
        return out

    return run
