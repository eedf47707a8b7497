"""``compile_model``: ONNX model -> loadable bytes (needs the ``onnx`` extra).

Usage::

    from pydla.compiler.api import compile_model
    result = compile_model("model.onnx")
    Path("model.dla").write_bytes(result.blob)
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pydla.compiler.input_shapes import check_input_shapes
from pydla.compiler.progress import Progress
from pydla.errors import DlaError, NvError
from pydla.target.config import load_config


def compile_model(model: str | Path | Any, *, config: str = "full", precision: str | None = None,
                  progress: Progress | None = None,
                  input_shapes: Mapping[str, Sequence[int]] | None = None, shave: bool = True,
                  base_dir: str | Path | None = None, calibration: Any = None,
                  calibration_method: str = "minmax", calibration_table_out: str | Path | None = None,
                  dequantize_qdq: bool = False, name: str | None = None,
                  shave_barriers: bool | None = None) -> Any:
    """Compile ``model`` (a path or an ``onnx.ModelProto``) for device configuration ``config``.

    ``input_shapes`` gives the sizes of the inputs' symbolic dimensions (the batch, a sequence
    length), whole shapes by input name: ``{"input_ids": (1, 128)}``. Without it a model whose
    inputs have symbolic dimensions is refused, each named.

    ``progress(done, total, what)`` is called as each phase starts and for each step lowered
    (the phases and the arguments: :mod:`pydla.compiler.progress`); the first call comes before
    the model is read, the last is ``progress(1, 1, "done")``.

    ``precision``: what the device computes in, "fp32", "fp16" or "int8"; None (the default): fp16
    for a float16 model (:mod:`pydla.compiler.half`) on a configuration computing FP16, else fp32.
    A float16 model's float16 inputs and outputs stay float16 in the loadable. "int8" needs a
    configuration with an INT8 path, and a calibration or a quantized (QDQ) model.

    ``calibration``: post-training INT8 calibration (:mod:`pydla.compiler.calibrate`): a
    :class:`~pydla.loadable.calibration_table.CalibrationTable` or a table file's path (checked to be
    this model's), a directory of .npy/.npz inputs or an iterable of input dicts, calibrated by
    ``calibration_method`` ("minmax", "percentile", "entropy"); the table is written to
    ``calibration_table_out`` when given (before a configuration without INT8 is refused) and
    recorded in the loadable's metadata (``pydla info`` shows it).

    ``dequantize_qdq``: compile a quantized model (QDQ, or QOperator such as QLinearConv:
    :mod:`pydla.compiler.qdq`) as the float model it approximates, on a configuration computing
    FP32 or FP16 (by default such a model needs an INT8 path).

    ``name``: how messages and the calibration table name the model (default: its path, or for an
    ``onnx.ModelProto`` its graph's name).

    ``shave``: on a configuration with SHAVE tiles, Softmax, LogSoftmax, Exp, Log, Sqrt, Erf, Gelu,
    Softplus, Mish, the Reduce* operators and LayerNormalization run there as SHAVE task lists
    (:mod:`pydla.compiler.shave_ops`); False keeps them host CPU runs (LayerNormalization
    decomposed), as on a configuration without tiles.

    ``shave_barriers``: a SHAVE step's first task list runs in the task of the DLA operations before
    it, each chunk's DMA started by a barrier its producer operations update (the VPUX per-variant
    barriers: :mod:`pydla.loadable.mixed_task`); False: the list waits for that whole task to end.
    None (the default): barriers unless the configuration's engine has a command processor
    (``"engine": {"command_processor": true}``, as ``full``): it runs a task from one doorbell but
    leaves a task with a SHAVE list beside its operations to the per-operation path, which costs
    more than the barriers save (the encoder's CPU time 6-16% more with them: bench/bench_barriers.py).

    ``base_dir``: where the relative kernel paths of custom SHAVE kernels (ONNX domain ai.pydla,
    :mod:`pydla.compiler.custom_kernel`) start; default: the model file's directory, or the current
    directory for a model given as an ``onnx.ModelProto``."""
    try:
        from pydla.compiler.custom_kernel import base_dir_of
        from pydla.compiler.graph import import_graph
        from pydla.compiler.lower import Lowering
        from pydla.compiler.onnx_model import load_model
        from pydla.compiler.progress import report
        from pydla.loadable.metadata import model_header
    except ImportError as e:
        raise DlaError(NvError.NotSupported, f"the compiler needs the onnx packages ({e.name} is missing): "
                                             "pip install 'pydla[onnx]'") from e
    from pydla.compiler import quantize
    from pydla.compiler.half import float32_view, has_float16

    shapes = check_input_shapes(input_shapes)
    if precision not in ("fp32", "fp16", "int8", None):
        raise DlaError(NvError.BadParameter, f"precision '{precision}': choose fp32, fp16 or int8")
    cfg = load_config(config)
    if precision == "fp16" and not any(p.name == "FP16" for p in cfg.precisions):
        raise DlaError(NvError.NotSupported, f"device config '{cfg.name}' has no fp16")
    if isinstance(model, (str, Path)):
        report(progress, "reading", detail=str(model))
    onnx_model = load_model(model)
    label = name or (str(model) if isinstance(model, (str, Path)) else (onnx_model.graph.name or "the model"))
    # refused before calibrating, if it is (an NVDLA configuration compiles INT8: pydla.compiler.nvdla)
    if precision == "int8" and calibration_table_out is None and cfg.nvdla is None:
        quantize.float_model(onnx_model, label, cfg, precision, calibration is not None, dequantize_qdq)
    table = quantize.calibration_table(onnx_model, label, calibration, calibration_method,
                                       calibration_table_out, progress)
    if cfg.nvdla is not None and (precision not in (None, "int8") or dequantize_qdq):
        raise DlaError(NvError.NotSupported, f"device config '{cfg.name}' is an NVDLA configuration: the "
                                             "compiler makes INT8 NVDLA Loadables for it (a calibration or a "
                                             f"quantized model), not {precision or 'float'} ones: `pydla "
                                             f"compile MODEL --config {cfg.name}` makes one, which "
                                             "pydla.Session runs")
    if cfg.nvdla is not None:
        # An NVDLA configuration: an INT8 NVDLA Loadable (pydla.compiler.nvdla)
        from pydla.compiler.nvdla.compile import compile_nvdla

        header = {quantize.HEADER_KEY: table.header()} if table is not None else {}
        nvdla_result = compile_nvdla(onnx_model, cfg, table, label, header)
        report(progress, "done", 1, 1)
        return nvdla_result
    onnx_model, precision, quantized = quantize.float_model(onnx_model, label, cfg, precision,
                                                            table is not None, dequantize_qdq,
                                                            calibration_table_out)
    if precision is None:
        fp16 = any(p.name == "FP16" for p in cfg.precisions) and has_float16(onnx_model)
        precision = "fp16" if fp16 else "fp32"
    half = float32_view(onnx_model, precision)
    # (a mixed task runs per operation on a device with a command processor: see the docstring)
    barriers = shave_barriers if shave_barriers is not None else not cfg.command_processor
    try:
        whole = frozenset({"LayerNormalization"}) if shave and cfg.shave is not None and precision == "fp32" \
            else frozenset()
        kernels = Path(base_dir) if base_dir is not None else base_dir_of(model)
        # A NaN among the weights that is a signalling one (any bit pattern a file may hold) makes
        # numpy's casts warn; the model's NaN is computed as NaN, and says nothing to the user.
        with np.errstate(invalid="ignore"):
            graph = import_graph(half.model if half else onnx_model, progress, shapes, whole, kernels)
            if half:
                graph.half_io = half.io(graph)
            result = Lowering(graph, cfg, progress, precision, use_shave=shave,
                              model_header=quantize.header(model_header(onnx_model), table, quantized),
                              shave_barriers=barriers).run()
    except DlaError as e:
        if e.message.isprintable():
            raise
        # A name from the model holding a line break or a control character, quoted as it is by
        # some message: the message stays one line, and cannot drive a terminal.
        from pydla.logconfig import printable

        raise DlaError(e.code, printable(e.message)) from e
    except MemoryError:
        raise DlaError(NvError.InsufficientMemory, "compiling the model ran out of memory") from None
    except Exception as e:  # a malformed model the checks above let through (or a compiler bug)
        from pydla.logconfig import Detail, first_line

        detail = Detail("".join(traceback.format_exception(e)))
        raise DlaError(NvError.BadValue, f"cannot compile the model: {type(e).__name__}: {first_line(e)} (a "
                                         "malformed model, or a pydla bug: please report it with the model "
                                         "and what `pydla compile -v` shows)") from detail
    # The blocks the operations use, as the runtime checks them when loading (re-reading the
    # loadable to find them cost a sixth of compiling a large graph).
    missing = sorted(b for b in result.operations if b not in ("CPU", "SHAVE") and not cfg.has_block(b))
    if missing:
        raise DlaError(NvError.NotSupported, f"the compiled network needs the {', '.join(missing)} block(s), "
                                             f"which device config '{cfg.name}' does not have")
    report(progress, "done", 1, 1)
    return result
