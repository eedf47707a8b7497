"""INT8 at the compiler's front: the calibration asked for (a table given back, or one made from
calibration inputs: :mod:`pydla.compiler.calibrate`), the quantized models read
(:mod:`pydla.compiler.qdq`), and what a configuration without an INT8 path does with them: refuse
them in one line naming the configuration, or, asked to (``dequantize_qdq``), compile a quantized
model as the float model it approximates (:mod:`pydla.compiler.qdq_float`).

INT8 results are never made up: until a configuration computes INT8, ``precision="int8"`` ends
with DlaError NotSupported (after the calibration table is written, when one is asked for).

Usage (what :func:`pydla.compiler.api.compile_model` does)::

    table = calibration_table(model, "m.onnx", "calib/", "entropy", "m.calib.json", None)
    model, precision, quantized = float_model(model, "m.onnx", cfg, "int8", table is not None, False)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydla.compiler.progress import Progress
from pydla.compiler.qdq import Quantization
from pydla.errors import DlaError, NvError
from pydla.loadable.calibration_table import CalibrationTable
from pydla.target.config import DeviceConfig

HEADER_KEY = "calibration"  # the recipe header's record of the table


def has_int8(cfg: DeviceConfig) -> bool:
    """Whether the configuration computes INT8 (an NVDLA one; none of pydla's own configurations)."""
    return any(p.name == "INT8" for p in cfg.precisions) or (cfg.nvdla is not None
                                                             and "INT8" in cfg.nvdla.precisions)


def _precisions(cfg: DeviceConfig) -> str:
    return ", ".join(p.name for p in cfg.precisions)


def calibration_table(model: Any, label: str, calibration: Any, method: str,
                      table_out: str | Path | None, progress: Progress | None) -> CalibrationTable | None:
    """The table ``calibration`` gives (see compile_model), checked against ``model``, written to
    ``table_out`` when given; None without a calibration."""
    from pydla.compiler.calibrate import calibrate

    if calibration is None:
        if table_out is not None:
            raise DlaError(NvError.BadParameter, "a calibration table to write needs calibration inputs "
                                                 "(--calibrate DIR)")
        return None
    if isinstance(calibration, CalibrationTable):
        table = calibration
        table.check_model(model, label)
    elif isinstance(calibration, (str, Path)) and Path(calibration).is_file():
        table = CalibrationTable.load(calibration)
        table.check_model(model, label)
    else:
        name = Path(label).name if label.endswith(".onnx") else label
        table = calibrate(model, calibration, method=method, progress=progress, name=name)
    if table_out is not None:
        table.save(table_out)
    return table


def float_model(model: Any, label: str, cfg: DeviceConfig, precision: str | None,
                calibrated: bool, dequantize_qdq: bool,
                table_out: str | Path | None = None) -> tuple[Any, str | None, Quantization | None]:
    """The model the float compiler takes, its precision and the quantization it was read with:
    ``model`` itself, or a quantized model dequantized; DlaError for INT8 that the configuration
    cannot compute."""
    from pydla.compiler.qdq import read_quantization
    from pydla.compiler.qdq_float import dequantized

    quantization = read_quantization(model)  # checked, whatever is done with it
    written = f" (the calibration table is written to {table_out})" if table_out is not None else ""
    if precision == "int8":
        if dequantize_qdq:
            raise DlaError(NvError.BadParameter, "dequantizing a quantized model computes it in float: "
                                                 "choose precision fp32 or fp16")
        if not calibrated and quantization is None:
            raise DlaError(NvError.BadParameter, "precision int8 needs a calibration (--calibrate DIR or "
                                                 "--calibration-table FILE) or a quantized (QDQ) model")
        if not has_int8(cfg):
            raise DlaError(NvError.NotSupported, f"device config '{cfg.name}' has no INT8 path (its "
                                                 f"precisions: {_precisions(cfg)}): compile with precision "
                                                 f"fp16 or fp32{written}")
        raise DlaError(NvError.NotSupported, f"device config '{cfg.name}': INT8 code generation is not "
                                             "part of this compiler yet: compile with precision fp16 or "
                                             f"fp32{written}")
    if quantization is None:
        if dequantize_qdq:
            raise DlaError(NvError.BadParameter, f"{label}: --dequantize-qdq is for quantized models, and "
                                                 "this one has no QuantizeLinear, DequantizeLinear or "
                                                 "QLinear operator")
        return model, precision, None
    if not dequantize_qdq:
        why = (f"device config '{cfg.name}' has no INT8 path (its precisions: {_precisions(cfg)})"
               if not has_int8(cfg) else f"device config '{cfg.name}': INT8 code generation is not part "
                                         "of this compiler yet")
        raise DlaError(NvError.NotSupported, f"{label} is a quantized model ({quantization.describe()}) and "
                                             f"{why}: --dequantize-qdq computes it in float")
    return dequantized(model), precision, quantization


QUANTIZED_KEY = "quantized_model"  # the recipe header's record of a quantized model compiled in float


def header(model_header: dict[str, Any], table: CalibrationTable | None,
           quantization: Quantization | None = None) -> dict[str, Any]:
    """The recipe header's metadata with the calibration table recorded in it, and what a
    dequantized model was (its quantized operators and tensors)."""
    out = model_header if table is None else {**model_header, HEADER_KEY: table.header()}
    if quantization is not None:
        per_channel = sum(p.per_channel for p in quantization.params.values())
        out = {**out, QUANTIZED_KEY: {"operators": dict(sorted(quantization.operators.items())),
                                      "tensors": len(quantization.params), "per_channel": per_channel,
                                      "computed": "dequantized"}}
    return out
