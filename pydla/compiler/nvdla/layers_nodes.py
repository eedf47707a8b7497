"""Each ONNX node as the INT8 back end's layers (:mod:`pydla.compiler.nvdla.layers`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from pydla.compiler.nvdla.layers import Layer, Weights, _attrs, _conv_attrs, _int8_quant, _Reader
from pydla.errors import DlaError, NvError

_PASS = {"Identity", "Dropout"}


def _where(n: onnx.NodeProto) -> str:
    return f"node '{n.name or n.output[0]}' ({n.op_type})"


def _dequantized_const(r: _Reader, t: str) -> tuple[np.ndarray, Any, Any] | None:
    """A DequantizeLinear of a constant: (integers, scales, zero points)."""
    return r.dq_const.get(t)


def _weights(r: _Reader, n: onnx.NodeProto, w_name: str, b_name: str | None, x_quant: Any) -> Weights:
    where = _where(n)
    dq = _dequantized_const(r, w_name)
    if dq is not None:
        q, s, z = dq
        q = q.astype(np.int64)
        k = q.shape[0]
        s = np.broadcast_to(np.asarray(s, np.float64).ravel(), (k,)) if np.size(s) in (1, k) else None
        if s is None:
            raise DlaError(
                NvError.NotSupported, f"{where}: weight scales along another axis than the output channels"
            )
        zz = np.broadcast_to(np.asarray(z, np.int64).ravel(), (k,))
        shifted = q - zz.reshape((k,) + (1,) * (q.ndim - 1))
        if shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
            raise DlaError(NvError.NotSupported, f"{where}: weights minus their zero point leave INT8")
        w = Weights(shifted.astype(np.int8), np.array(s, np.float64))
    else:
        f0 = r.const(w_name)
        if f0 is None:
            raise DlaError(NvError.NotSupported, f"{where}: weights that are not constant")
        w = Weights(np.asarray(f0, np.float32))
    if b_name:
        bq = _dequantized_const(r, b_name)
        if bq is not None:
            w.bias_int = bq[0].astype(np.int64) - np.asarray(bq[2], np.int64)
            w.bias = w.bias_int * np.asarray(bq[1], np.float64)
        else:
            b = r.const(b_name)
            if b is None:
                raise DlaError(NvError.NotSupported, f"{where}: a bias that is not constant")
            w.bias = np.asarray(b, np.float64)
    return w


def _qlinear(r: _Reader, n: onnx.NodeProto, i: int) -> tuple[float, int]:
    return _int8_quant(r.const(n.input[i]), r.opt(n, i + 1), _where(n))


def read_node(r: _Reader, n: onnx.NodeProto) -> None:
    op, where = n.op_type, _where(n)
    ins, out = list(n.input), n.output[0] if n.output else ""
    if op == "Constant":
        return
    if op == "DequantizeLinear":
        x = r.const(ins[0])
        if x is not None:
            scale, zero = r.const(ins[1]), r.opt(n, 2)
            if scale is None:
                raise DlaError(NvError.NotSupported, f"{where}: a scale that is not constant")
            r.dq_const[out] = (x, scale, zero if zero is not None else np.zeros(1, np.int64))
            return
        r.quant[ins[0]] = _int8_quant(r.const(ins[1]), r.opt(n, 2), where)
        r.alias[out] = ins[0]
        return
    if op == "QuantizeLinear":
        r.quant[out] = _int8_quant(r.const(ins[1]), r.opt(n, 2), where)
        r.quant[ins[0]] = r.quant[out]
        r.alias[out] = ins[0]
        return
    if op in _PASS:
        r.alias[out] = ins[0]
        return
    a = _attrs(n)
    if op in ("Conv", "QLinearConv", "ConvInteger"):
        if op == "QLinearConv":
            xq, yq = _qlinear(r, n, 1), _qlinear(r, n, 6)
            r.quant[ins[0]], r.quant[out] = xq, yq
            w = r.const(ins[3])
            if w is None:
                raise DlaError(NvError.NotSupported, f"{where}: weights that are not constant")
            r.dq_const[ins[3]] = (w, r.const(ins[4]), r.opt(n, 5) if r.opt(n, 5) is not None else np.zeros(1))
            bias = ins[8] if len(ins) > 8 and ins[8] else None
            if bias is not None:
                b = r.const(bias)
                if b is None:
                    raise DlaError(NvError.NotSupported, f"{where}: a bias that is not constant")
                ws = np.asarray(r.const(ins[4]), np.float64)
                r.dq_const[bias] = (b, xq[0] * ws, np.zeros(1, np.int64))
            weights = _weights(r, n, ins[3], bias, xq)
        elif op == "ConvInteger":
            raise DlaError(
                NvError.NotSupported,
                f"{where}: ConvInteger's output is int32 (no requantization "
                "to compile to INT8); use QLinearConv",
            )
        else:
            weights = _weights(r, n, ins[1], ins[2] if len(ins) > 2 and ins[2] else None, None)
        kshape = weights.values.shape
        if len(kshape) != 4:
            raise DlaError(NvError.NotSupported, f"{where}: a {len(kshape) - 2}-D convolution (2-D only)")
        r.layers.append(Layer("conv", [ins[0]], out, _conv_attrs(n, kshape[2:]), weights, n.name))
        return
    if op in ("Gemm", "MatMul", "QLinearMatMul", "QGemm"):
        _fully_connected(r, n, a)
        return
    if op in ("MaxPool", "AveragePool", "QLinearAveragePool"):
        if op == "QLinearAveragePool":
            r.quant[ins[0]], r.quant[out] = _qlinear(r, n, 1), _qlinear(r, n, 3)
        attrs = _conv_attrs(n, tuple(a.get("kernel_shape", (1, 1))))
        if attrs["ceil_mode"]:
            raise DlaError(NvError.NotSupported, f"{where}: ceil_mode 1")
        r.layers.append(Layer("maxpool" if op == "MaxPool" else "avgpool", [ins[0]], out, attrs, name=n.name))
        return
    if op in ("GlobalAveragePool", "QLinearGlobalAveragePool"):
        if op == "QLinearGlobalAveragePool":
            r.quant[ins[0]], r.quant[out] = _qlinear(r, n, 1), _qlinear(r, n, 3)
        r.layers.append(Layer("gap", [ins[0]], out, name=n.name))
        return
    if op in ("Add", "QLinearAdd"):
        if op == "QLinearAdd":
            r.quant[ins[0]], r.quant[ins[3]], r.quant[out] = (
                _qlinear(r, n, 1),
                _qlinear(r, n, 4),
                _qlinear(r, n, 6),
            )
            ins = [ins[0], ins[3]]
        if any(r.const(i) is not None for i in ins):
            raise DlaError(NvError.NotSupported, f"{where}: adding a constant (only two tensors)")
        r.layers.append(Layer("add", ins[:2], out, name=n.name))
        return
    if op in ("Concat", "QLinearConcat"):
        if a.get("axis", 1) not in (1, -3):
            raise DlaError(
                NvError.NotSupported, f"{where}: concatenation along axis {a.get('axis')} (channels only)"
            )
        if op == "QLinearConcat":
            r.quant[out] = _int8_quant(r.const(ins[0]), r.const(ins[1]), where)
            tensors = ins[2::3]
            for j, t in enumerate(tensors):
                r.quant[t] = _int8_quant(r.const(ins[3 + 3 * j]), r.const(ins[4 + 3 * j]), where)
            ins = tensors
        r.layers.append(Layer("concat", ins, out, name=n.name))
        return
    if op == "Relu":
        r.layers.append(Layer("relu", [ins[0]], out, name=n.name))
        return
    if op == "BatchNormalization":
        _fold_batch_norm(r, n, a)
        return
    if op == "Clip":
        lo = r.opt(n, 1) if len(ins) > 1 else a.get("min")
        hi = r.opt(n, 2) if len(ins) > 2 else a.get("max")
        r.layers.append(
            Layer(
                "clip",
                [ins[0]],
                out,
                {
                    "min": None if lo is None else float(np.asarray(lo)),
                    "max": None if hi is None else float(np.asarray(hi)),
                },
                name=n.name,
            )
        )
        return
    if op == "Softmax":
        r.layers.append(Layer("softmax", [ins[0]], out, {"axis": int(a.get("axis", -1))}, name=n.name))
        return
    if op in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
        r.layers.append(Layer("reshape", [ins[0]], out, name=n.name))
        return
    raise DlaError(NvError.NotSupported, f"{where}: the INT8 back end for NVDLA does not compile {op}")


def _fully_connected(r: _Reader, n: onnx.NodeProto, a: dict[str, Any]) -> None:
    where, ins, out = _where(n), list(n.input), n.output[0]
    if n.op_type in ("QLinearMatMul", "QGemm"):
        gemm = n.op_type == "QGemm"
        if gemm and (a.get("transA", 0) or a.get("alpha", 1.0) != 1.0):
            raise DlaError(NvError.NotSupported, f"{where}: transA or alpha")
        xq, yq = _qlinear(r, n, 1), _qlinear(r, n, 7 if gemm else 6)
        r.quant[ins[0]], r.quant[out] = xq, yq
        w = r.const(ins[3])
        if w is None:
            raise DlaError(NvError.NotSupported, f"{where}: weights that are not constant")
        trans_b = gemm and int(a.get("transB", 0))
        r.dq_const[ins[3]] = (
            np.ascontiguousarray(np.asarray(w) if trans_b else np.asarray(w).T),
            r.const(ins[4]),
            r.opt(n, 5) if r.opt(n, 5) is not None else np.zeros(1),
        )
        bias = ins[6] if gemm and len(ins) > 6 and ins[6] else None
        if bias is not None:
            b = r.const(bias)
            if b is None:
                raise DlaError(NvError.NotSupported, f"{where}: a bias that is not constant")
            r.dq_const[bias] = (b, xq[0] * np.asarray(r.const(ins[4]), np.float64), np.zeros(1, np.int64))
        weights = _weights(r, n, ins[3], bias, xq)
    else:
        trans_b = int(a.get("transB", 0)) if n.op_type == "Gemm" else 0
        if n.op_type == "Gemm" and (
            a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0
        ):
            raise DlaError(NvError.NotSupported, f"{where}: transA, alpha or beta")
        dq = r.dq_const.get(ins[1])
        if dq is not None:
            q, s, z = dq
            if not trans_b:
                q = q.T
                if np.size(s) > 1:
                    pass  # per output column: axis 1 of (C, K) becomes axis 0
            r.dq_const[ins[1] + "#k"] = (np.ascontiguousarray(q), s, z)
            weights = _weights(r, n, ins[1] + "#k", None, None)
        else:
            f = r.const(ins[1])
            if f is None:
                raise DlaError(NvError.NotSupported, f"{where}: weights that are not constant")
            weights = Weights(np.asarray(f if trans_b else np.asarray(f).T, np.float32))
        if n.op_type == "Gemm" and len(ins) > 2 and ins[2]:
            bq = r.dq_const.get(ins[2])
            if bq is not None:
                weights.bias_int = bq[0].astype(np.int64)
                weights.bias = weights.bias_int * np.asarray(bq[1], np.float64)
            else:
                b = r.const(ins[2])
                if b is None:
                    raise DlaError(NvError.NotSupported, f"{where}: a bias that is not constant")
                weights.bias = np.asarray(b, np.float64).ravel()
    k, c = weights.values.shape[:2]
    weights.values = weights.values.reshape(k, c, 1, 1)
    r.layers.append(
        Layer(
            "conv",
            [ins[0]],
            out,
            {
                "kernel": (1, 1),
                "strides": (1, 1),
                "dilations": (1, 1),
                "pads": (0, 0, 0, 0),
                "group": 1,
                "fc": True,
            },
            weights,
            n.name,
        )
    )


def _fold_batch_norm(r: _Reader, n: onnx.NodeProto, a: dict[str, Any]) -> None:
    """A BatchNormalization after a float convolution, folded into its kernels and bias."""
    where, ins = _where(n), list(n.input)
    conv = next((x for x in reversed(r.layers) if x.output == ins[0]), None)
    params = [r.const(i) for i in ins[1:5]]
    users = sum(ins[0] in m.input for m in r.model.graph.node)
    if (
        conv is None
        or conv.op != "conv"
        or conv.weights is None
        or conv.weights.scales is not None
        or any(p is None for p in params)
        or users != 1
    ):
        raise DlaError(
            NvError.NotSupported,
            f"{where}: a batch normalization that does not follow a float "
            "convolution alone (it is folded into one)",
        )
    gamma, beta, mean, var = (np.asarray(p, np.float64).ravel() for p in params)
    k = gamma / np.sqrt(var + float(a.get("epsilon", 1e-5)))
    w = conv.weights
    bias = w.bias if w.bias is not None else np.zeros(len(k))
    w.values = (w.values * k.reshape((-1,) + (1,) * (w.values.ndim - 1))).astype(np.float32)
    w.bias = (np.asarray(bias, np.float64) - mean) * k + beta
    conv.output = n.output[0]
