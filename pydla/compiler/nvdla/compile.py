"""``compile_model(..., config="nv_small")``: an ONNX model as an INT8 NVDLA Loadable.

The model is a float model with a calibration table (the weights are quantized here), or a quantized
model (QDQ or QOperator). The loadable's bound tensors are INT8 feature surfaces; their scales and
zero points are kept in the loadable (the blob ``pydla_int8_tensors``, JSON) so that
:func:`quantize_inputs` and :func:`dequantize_outputs` convert to and from float and ``pydla info``
shows them.

Usage::

    result = compile_nvdla(onnx_model, cfg, table, "model.onnx")
    Path("model.nvdla").write_bytes(result.blob)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.compiler.nvdla.emit import emit_loadable, hardware_operations
from pydla.compiler.nvdla.layers import read_layers
from pydla.compiler.nvdla.layout import Facts
from pydla.compiler.nvdla.lower import lower
from pydla.compiler.nvdla.plan import ConvOp, Plan
from pydla.errors import DlaError, NvError
from pydla.loadable.nvdla import model as M
from pydla.loadable.nvdla.quantization import FORMAT, tensor_quantization
from pydla.loadable.nvdla.writer import write_nvdla_loadable

__all__ = ["NvdlaResult", "compile_nvdla", "dequantize", "quantize", "tensor_quantization"]


@dataclass
class _Memory:
    total: int

    def report(self) -> str:
        return f"{self.total} bytes of feature buffers"


@dataclass
class NvdlaResult:
    """What :func:`compile_nvdla` made (the fields ``pydla compile`` reports)."""

    blob: bytes
    plan: Plan
    loadable: M.NvdlaLoadable
    operations: dict[str, int]
    steps: int
    memory: _Memory
    weights_bytes: int
    cpu_runs: list[dict[str, Any]] = field(default_factory=list)


def metadata(plan: Plan, header: Mapping[str, Any]) -> dict[str, Any]:
    tensors = {
        b.name: {
            "role": b.role,
            "bind_id": b.bind_id,
            "type": "int8",
            "shape": list(b.shape),
            "scale": b.scale,
            "zero_point": b.zero_point,
        }
        for b in plan.buffers.values()
        if b.role != "scratch"
    }
    return {
        "format": FORMAT,
        "version": 1,
        "quantization": plan.notes.get("kind"),
        "tensors": tensors,
        **dict(header),
    }


def compile_nvdla(
    model: Any, cfg: Any, table: Any, label: str, header: Mapping[str, Any] | None = None
) -> NvdlaResult:
    """The INT8 NVDLA Loadable of ``model`` (an onnx.ModelProto) for NVDLA configuration ``cfg``."""
    if cfg.nvdla is None or "INT8" not in cfg.nvdla.precisions:
        raise DlaError(
            NvError.NotSupported, f"device config '{cfg.name}' is not an NVDLA configuration computing INT8"
        )
    net = read_layers(model, table)
    if net.kind == "float":
        raise DlaError(
            NvError.BadParameter,
            f"{label}: an INT8 NVDLA Loadable needs a calibration "
            "(--calibrate DIR or --calibration-table FILE) or a quantized "
            "(QDQ or QOperator) model",
        )
    facts = Facts.of(cfg.nvdla)
    plan = lower(net, facts)
    meta = json.dumps(metadata(plan, header or {}), sort_keys=True).encode()
    lo = emit_loadable(plan, facts, meta)
    blob = write_nvdla_loadable(lo)
    weights = sum(int(op.weights.size) for op in plan.ops if isinstance(op, ConvOp))
    feature = sum(int(np.prod(b.shape)) for b in plan.buffers.values())
    return NvdlaResult(blob, plan, lo, hardware_operations(lo), len(net.layers), _Memory(feature), weights)


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """``clip(round(x / scale) + zero_point)`` as int8 (round half to even, as onnxruntime)."""
    out: np.ndarray = np.clip(np.rint(np.asarray(x, np.float64) / scale) + zero_point, -128, 127).astype(
        np.int8
    )
    return out


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    out: np.ndarray = ((np.asarray(q, np.float32) - zero_point) * np.float32(scale)).astype(np.float32)
    return out
