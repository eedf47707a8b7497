"""Post-training INT8 calibration: the float model run over calibration inputs, every float tensor's
range collected (min-max, percentile or entropy: :mod:`pydla.compiler.ranges`), and the result as a
calibration table (:mod:`pydla.loadable.calibration_table`).

The float model is run by onnxruntime when it is installed (the dev extra has it), else by onnx's
reference implementation (the onnx extra): the ranges are those of the FP32 model as its authors
meant it, not of a device's rounding. Every node output becomes an output of the run.

Calibration inputs are a directory or an iterable:

- a directory of ``.npy`` files, one array per run, for a model with one input; or of ``.npz``
  files holding one array per input name (any model); in file-name order;
- an iterable of dicts {input name: array} (or of arrays, for a model of one input).

Percentile and entropy go over the inputs twice (the histograms' range comes from the first pass):
an iterator is kept in memory for that, a directory is read again.

Usage::

    table = calibrate("model.onnx", "calib/", method="entropy")
    table.save("model.calib.json")
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pydla.compiler.progress import Progress, report
from pydla.compiler.ranges import DEFAULT_PERCENTILE, RangeObserver, check_method, scale_of
from pydla.errors import DlaError, NvError, file_error
from pydla.loadable.calibration_table import CalibrationTable, TensorRange, model_digest
from pydla.logconfig import Detail, first_line

Feeds = Mapping[str, np.ndarray]
CalibrationData = str | Path | Iterable[Any]


def calibrate(model: Any, data: CalibrationData, *, method: str = "minmax",
              percentile: float = DEFAULT_PERCENTILE, progress: Progress | None = None,
              name: str | None = None) -> CalibrationTable:
    """The calibration table of ``model`` (a path or an ``onnx.ModelProto``) over ``data`` (see
    the module) by ``method``: "minmax", "percentile" (``percentile`` % of the magnitudes) or
    "entropy". ``progress(done, total, what)`` is called for each run (phase "calibrating");
    ``name`` names the model in the table (default: the file's name, else the graph's)."""
    from pydla.compiler.onnx_model import load_model

    check_method(method, percentile)
    onnx_model = load_model(model)
    if name is None:
        name = Path(model).name if isinstance(model, (str, Path)) else (onnx_model.graph.name or "model")
    runner = FloatRunner(onnx_model)
    samples = CalibrationInputs(data, runner.inputs)
    observer = RangeObserver(method, percentile)
    passes = 2 if observer.needs_histograms else 1
    count = 0
    for p in range(passes):
        if p == 1:
            observer.start_histograms()
        for i, (label, feeds) in enumerate(samples.each()):
            total = passes * len(samples) if samples.sized else 0
            report(progress, "calibrating", p * len(samples) + i + 1 if samples.sized else 0, total, label)
            observer.observe(runner.run(feeds, label))
            count = i + 1
    if count == 0:
        raise DlaError(NvError.BadValue, f"no calibration inputs in {samples.label}")
    tensors = {t: TensorRange(scale_of(threshold), 0, method, span, threshold)
               for t, (threshold, span) in observer.thresholds().items()}
    return CalibrationTable(name, model_digest(onnx_model), method, count, tensors,
                            percentile if method == "percentile" else None)


class FloatRunner:
    """The float model with every node output made a graph output, run by onnxruntime (graph
    optimizations off: each tensor computed as the model says) or onnx's reference evaluator."""

    def __init__(self, model: Any) -> None:
        import onnx
        from onnx import helper, shape_inference

        initializers = {init.name for init in model.graph.initializer}
        graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
        self.inputs: dict[str, tuple[tuple[int | None, ...], np.dtype[Any]]] = {
            vi.name: (tuple(d.dim_value if d.HasField("dim_value") else None
                            for d in vi.type.tensor_type.shape.dim),
                      np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)))
            for vi in graph_inputs}
        wide = onnx.ModelProto()
        wide.CopyFrom(model)
        try:
            inferred = shape_inference.infer_shapes(model)
            types = {vi.name: vi for vi in inferred.graph.value_info}
        except Exception:  # inference is only for the outputs' types: without, they stay untyped
            types = {}
        declared = {o.name for o in wide.graph.output}
        for n in wide.graph.node:
            for out in n.output:
                if out and out not in declared:
                    declared.add(out)
                    if out in types:
                        wide.graph.output.append(types[out])
                    else:
                        wide.graph.output.append(helper.make_empty_tensor_value_info(out))
        self.names = [o.name for o in wide.graph.output]
        self._run = _session(wide)

    def run(self, feeds: Feeds, label: str) -> dict[str, np.ndarray]:
        """Every float tensor of one run of the model on ``feeds`` (plus its inputs)."""
        try:
            values = self._run(dict(feeds))
        except Exception as e:  # the runtime's own errors, for inputs the model cannot take
            raise DlaError(NvError.BadValue, f"calibration input {label}: the float model does not run "
                                             f"on it: {first_line(e)}") from Detail(str(e))
        out = dict(zip(self.names, values, strict=True))
        out.update(feeds)
        return out


def _session(model: Any) -> Any:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        return lambda feeds: evaluator.run(None, feeds)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise DlaError(NvError.NotSupported, f"onnxruntime cannot run the float model for calibration: "
                                             f"{first_line(e)}") from Detail(str(e))
    return lambda feeds: sess.run(None, feeds)


class CalibrationInputs:
    """The calibration runs' inputs, checked against the model's inputs (names, types, shapes)."""

    def __init__(self, data: CalibrationData,
                 inputs: Mapping[str, tuple[tuple[int | None, ...], np.dtype[Any]]]) -> None:
        self.inputs = inputs
        self.files: list[Path] | None = None
        self.items: list[Any] | None = None
        self.iterable: Iterable[Any] | None = None
        if isinstance(data, (str, Path)):
            directory = Path(data)
            self.label = str(directory)
            if not directory.is_dir():
                if directory.exists():
                    raise DlaError(NvError.BadParameter, f"{directory}: calibration inputs are a directory "
                                                         "of .npy or .npz files, not a file")
                raise file_error(directory, FileNotFoundError(2, "No such file or directory"))
            self.files = sorted(f for f in directory.iterdir()
                                if f.suffix in (".npy", ".npz") and f.is_file())
            if not self.files:
                raise DlaError(NvError.BadValue, f"{directory}: no .npy or .npz files (calibration inputs)")
        elif isinstance(data, Iterable) and not isinstance(data, (bytes, Mapping, np.ndarray)):
            self.label = "the calibration data"
            # An iterator goes once: kept for the second pass.
            self.items = list(data) if iter(data) is data else None
            self.iterable = data
        else:
            raise DlaError(NvError.BadParameter, f"calibration data: a directory or an iterable of dicts "
                                                 f"{{input name: array}}, not {type(data).__name__}")

    @property
    def sized(self) -> bool:
        return self.files is not None or self.items is not None or hasattr(self.iterable, "__len__")

    def __len__(self) -> int:
        if self.files is not None:
            return len(self.files)
        source = self.items if self.items is not None else self.iterable
        return len(source) if hasattr(source, "__len__") else 0  # type: ignore[arg-type]

    def each(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """(label, feeds) per run."""
        if self.files is not None:
            for f in self.files:
                yield str(f), self.check(self._read(f), str(f))
            return
        source = self.items if self.items is not None else self.iterable
        assert source is not None
        for i, item in enumerate(source):
            label = f"#{i}"
            if isinstance(item, np.ndarray) and len(self.inputs) == 1:
                item = {next(iter(self.inputs)): item}
            if not isinstance(item, Mapping):
                raise DlaError(NvError.BadValue, f"calibration input {label}: a dict {{input name: array}}, "
                                                 f"not {type(item).__name__}")
            yield label, self.check(item, label)

    def _read(self, f: Path) -> Mapping[str, Any]:
        try:
            loaded = np.load(f, allow_pickle=False)
        except OSError as e:
            raise file_error(f, e) from e
        except Exception as e:  # numpy's ValueError (pickled, truncated) and zipfile's
            raise DlaError(NvError.BadValue, f"{f}: not a .npy/.npz array file: {first_line(e)}") from None
        if isinstance(loaded, np.ndarray):
            if len(self.inputs) != 1:
                raise DlaError(NvError.BadValue, f"{f}: a .npy file holds one array, but the model has "
                                                 f"{len(self.inputs)} inputs ({', '.join(self.inputs)}): "
                                                 "give .npz files with one array per input name")
            return {next(iter(self.inputs)): loaded}
        with loaded:
            return {k: loaded[k] for k in loaded.files}

    def check(self, feeds: Mapping[str, Any], label: str) -> dict[str, np.ndarray]:
        """``feeds`` as the model takes them: every input given, no other; float arrays in the
        input's float type; the static dimensions equal."""
        missing = [n for n in self.inputs if n not in feeds]
        extra = [n for n in feeds if n not in self.inputs]
        if missing or extra:
            said = (f"input '{missing[0]}' is missing" if missing else f"'{extra[0]}' is not an input")
            raise DlaError(NvError.BadValue, f"calibration input {label}: {said} (the model's inputs: "
                                             f"{', '.join(self.inputs)})")
        out: dict[str, np.ndarray] = {}
        for name, (shape, dtype) in self.inputs.items():
            a = np.asarray(feeds[name])
            if a.dtype != dtype and not (a.dtype.kind == "f" and dtype.kind == "f"):
                raise DlaError(NvError.BadValue, f"calibration input {label}: '{name}' is {a.dtype}; the "
                                                 f"model takes {dtype}")
            if len(a.shape) != len(shape) or any(d is not None and d > 0 and d != s
                                                 for d, s in zip(shape, a.shape, strict=True)):
                want = tuple("?" if d is None or d <= 0 else d for d in shape)
                raise DlaError(NvError.BadValue, f"calibration input {label}: '{name}' has shape "
                                                 f"{a.shape}; the model takes {want}")
            out[name] = np.ascontiguousarray(a, dtype=dtype)
        return out
