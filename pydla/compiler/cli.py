"""``pydla compile``: ONNX model -> loadable."""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

from pydla.compiler.onnx_extra import import_onnx
from pydla.errors import file_error
from pydla.files import check_output, read_head


def register(commands: Any) -> None:
    p = commands.add_parser(
        "compile", help="compile an ONNX model into a loadable (.dla)",
        description="Compile an ONNX model into a pydla loadable for a device configuration. A "
                    "loadable's shapes are static (any batch size): an input with symbolic dimensions (a "
                    "dynamic batch or sequence length, as exporters leave them) needs --input-shape; the "
                    "shape arithmetic of exported models is folded at compile time. Opsets before 11 are "
                    "upgraded to 11 by onnx's version converter. Progress is shown on stderr when it is a "
                    "terminal. Needs the onnx extra.")
    p.add_argument("model", type=Path, metavar="MODEL.onnx")
    p.add_argument("-o", "--output", type=Path, metavar="MODEL.dla",
                   help="where to write the loadable (default: the model's name with .dla)")
    from pydla.target.config import bundled_configs

    p.add_argument("--config", default="full",
                   help=f"device configuration: {', '.join(bundled_configs())} or a JSON file")
    p.add_argument("--precision", default=None, choices=("fp32", "fp16", "int8"),
                   help="device precision: fp16 halves the weights and converts inputs and outputs "
                        "(which keep the model's type) on the device; default: fp16 for a float16 "
                        "model on a configuration computing FP16, else fp32. int8 needs a configuration "
                        "with an INT8 path and --calibrate, --calibration-table or a quantized model")
    cal = p.add_argument_group("INT8 calibration")
    given = cal.add_mutually_exclusive_group()
    given.add_argument("--calibrate", type=Path, metavar="DIR",
                       help="calibrate the float model over the inputs in DIR (.npy files, one per run, for "
                            "a model of one input; .npz files of one array per input name); the table is "
                            "recorded in the loadable (`pydla info` shows it)")
    given.add_argument("--calibration-table", type=Path, metavar="FILE",
                       help="a calibration table written by --calibration-table-out for this model")
    cal.add_argument("--calibration-method", default="minmax", choices=("minmax", "percentile", "entropy"),
                     help="how each tensor's range is chosen: minmax (all values; the default), percentile "
                          "(99.99%% of the magnitudes), entropy (TensorRT's KL divergence)")
    cal.add_argument("--calibration-table-out", type=Path, metavar="FILE",
                     help="write the calibration table (JSON) here, before any refusal of INT8")
    p.add_argument("--dequantize-qdq", action="store_true",
                   help="compile a quantized model (QDQ, QLinearConv ...) as the float model it approximates "
                        "(weights dequantized, activations rounded to their quantization steps in float), "
                        "for a configuration without an INT8 path")
    add_input_shape_option(p)
    p.add_argument("--no-shave", action="store_true",
                   help="keep Softmax, LogSoftmax, Exp, Log, Sqrt, Erf, Gelu, Softplus, Mish, the "
                        "reductions and LayerNormalization on the host (CPU runs) even when the "
                        "configuration has SHAVE tiles, which run them by default")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=_compile)


def add_input_shape_option(p: argparse.ArgumentParser) -> None:
    """``--input-shape NAME=D0,D1,...`` (repeatable), for the commands that compile ONNX models."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the whole shape of input NAME, sizing its symbolic dimensions (batch, sequence), "
                        "e.g. --input-shape input_ids=1,128; repeat it for each such input")


def _calibration(args: argparse.Namespace, model: Any) -> Any:
    """The calibration the flags give: the inputs' directory, a table read back (checked against
    the model by compile_model), or none."""
    if args.calibration_table is not None:
        from pydla.loadable.calibration_table import CalibrationTable

        return CalibrationTable.load(args.calibration_table, flag="--calibration-table")
    return args.calibrate


def _compile(args: argparse.Namespace) -> int:
    from pydla.compiler.api import compile_model
    from pydla.compiler.input_shapes import parse_input_shapes

    shapes = parse_input_shapes(args.input_shape)  # a malformed flag fails before the model is read
    if args.calibration_table_out is not None and args.calibrate is None:
        from pydla.errors import DlaError, NvError

        raise DlaError(NvError.BadParameter, "--calibration-table-out needs --calibrate DIR (the inputs to "
                                             "calibrate with)")
    read_head(args.model)  # a missing file, a directory: said before anything else
    if args.calibration_table is not None:
        read_head(args.calibration_table)
    out = args.output or args.model.with_suffix(".dla")
    # Before compiling (which may take minutes), and never onto the model itself.
    check_output(out, "-o" if args.output is not None else None, {"the model being compiled": args.model})
    import_onnx()  # the extra's one-line hint
    from pydla.compiler.input_shapes import (
        FLAG,
        GivenShapes,
        batch_defaults,
        batch_note,
        declared,
        graph_inputs,
    )
    from pydla.compiler.onnx_model import load_model
    from pydla.compiler.progress import report

    progress = None
    if sys.stderr.isatty() and not args.quiet:  # a bar in a log file or a pipe is only noise
        from pydla.compiler.progress import TerminalProgress

        progress = TerminalProgress(sys.stderr)
    t0 = time.perf_counter()
    # The compiler makes next to no reference cycles, and the cyclic collector's passes over a large
    # graph's objects cost a fifth of compiling it: off while this command compiles (not in
    # compile_model, which may run beside other threads of an application).
    collecting = gc.isenabled()
    gc.disable()
    try:
        report(progress, "reading", detail=str(args.model))
        model = load_model(args.model)
        # An input whose only dynamic dimension is the batch is compiled for batch 1, and the report
        # says so.
        defaults = batch_defaults(model, shapes)
        notes = [batch_note(vi.name, declared(vi) or [], "compiled") for vi in graph_inputs(model)
                 if vi.name in defaults]
        calibration = _calibration(args, model)
        result = compile_model(model, config=args.config, precision=args.precision, progress=progress,
                               input_shapes=GivenShapes({**shapes, **defaults}, named=FLAG),
                               shave=not args.no_shave, base_dir=args.model.resolve().parent,
                               calibration=calibration, calibration_method=args.calibration_method,
                               calibration_table_out=args.calibration_table_out,
                               dequantize_qdq=args.dequantize_qdq, name=str(args.model))
    finally:
        if collecting:
            gc.enable()
        if progress is not None:
            progress.close()  # an error's message starts on a line of its own
    try:
        out.write_bytes(result.blob)
    except OSError as e:
        raise file_error(out, e, flag="-o" if args.output is not None else None, writing=True) from e
    if not args.quiet:
        for note in notes:
            print(note)
        if args.calibration_table_out is not None:
            print(f"calibration table: {args.calibration_table_out} ({args.calibration_method})")
        ops = ", ".join(f"{b} {n}" for b, n in sorted(result.operations.items()))
        print(f"{out}: {len(result.blob)} bytes, {sum(result.operations.values())} device operations "
              f"({ops}) from {result.steps} steps in {(time.perf_counter() - t0) * 1e3:.0f} ms")
        print(f"memory: {result.memory.report()}; weights {result.weights_bytes} bytes")
        if result.cpu_runs:
            made_by = ", ".join(sorted({n["op"] for n in result.cpu_runs if n.get("op")}))
            print(f"cpu runs: {len(result.cpu_runs)} ({made_by}), each a split of the NPU work: "
                  f"`pydla info {out}` says why each exists")
    return 0
