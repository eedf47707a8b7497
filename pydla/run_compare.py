"""``pydla run MODEL.nvdla --compare-fp32 MODEL.onnx``: an INT8 NVDLA Loadable made by pydla's compiler
run on the device against the float model it was compiled from, output by output: the largest and
mean absolute difference (also in the output's quantization steps), the relative difference, and for
a vector of scores the top-1 agreement.

Inputs are float arrays (``--input [NAME=]FILE.npy``, a batch of N is N runs), quantized with the
scale and zero point the loadable records; without ``--input``, ``--iterations`` random normal inputs
(``--seed``).

Usage: ``pydla run resnet.nvdla --config nv_small --compare-fp32 resnet.onnx --input batch.npy``
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError, file_error
from pydla.run_inputs import read_inputs


def _float_runner(model: Path) -> Any:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]

        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds), [o.name for o in sess.get_outputs()]
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(str(model))
        return lambda feeds: ref.run(None, feeds), list(ref.output_names)


def compare_fp32(args: argparse.Namespace, text: Any) -> int:
    """See the module docstring; ``text`` is where the report goes."""
    import pydla
    from pydla.compiler.nvdla.compile import dequantize, quantize
    from pydla.loadable.nvdla.quantization import tensor_quantization
    from pydla.loadable.nvdla.reader import read_nvdla_loadable

    try:
        blob = Path(args.model).read_bytes()
    except OSError as e:
        raise file_error(args.model, e) from e
    meta = tensor_quantization(read_nvdla_loadable(blob))
    if not meta:
        raise DlaError(
            NvError.BadParameter,
            f"--compare-fp32: {args.model} records no tensor quantization "
            "(an INT8 NVDLA Loadable from `pydla compile --config nv_...`)",
        )
    inputs = {n: t for n, t in meta.items() if t.get("role") == "input"}
    run_float, float_outputs = _float_runner(Path(args.compare_fp32))
    samples: list[dict[str, np.ndarray]] = []
    given = read_inputs(args.input)
    if given:
        arrays: dict[str, np.ndarray] = {}
        for name, array, file in given:
            key = name if name is not None else (next(iter(inputs)) if len(inputs) == 1 else None)
            if key not in inputs:
                raise DlaError(
                    NvError.BadParameter, f"--input {file}: the loadable's inputs are {', '.join(inputs)}"
                )
            arrays[key] = np.asarray(array, np.float32)
        count = min(a.shape[0] for a in arrays.values())
        samples = [{k: a[i : i + 1] for k, a in arrays.items()} for i in range(count)]
    else:
        rng = np.random.default_rng(args.seed)
        samples = [
            {k: rng.standard_normal((1, *t["shape"])).astype(np.float32) for k, t in inputs.items()}
            for _ in range(args.iterations)
        ]
    config = args.config or "nv_small"
    sess = pydla.Session(str(args.model), config=config, device=args.device)
    out_names = [o.name for o in sess.get_outputs()]
    errors: dict[str, list[tuple[float, float, float, float, int]]] = {n: [] for n in out_names}
    for feeds in samples:
        quantized = {
            k: quantize(v[0], inputs[k]["scale"], inputs[k]["zero_point"])[None] for k, v in feeds.items()
        }
        got = dict(zip(out_names, sess.run(None, quantized), strict=True))
        expected = dict(zip(float_outputs, run_float(feeds), strict=True))
        for name in out_names:
            if name not in expected:
                raise DlaError(
                    NvError.BadParameter,
                    f"--compare-fp32: output '{name}' is not an output of {args.compare_fp32}",
                )
            q = meta[name]
            y = dequantize(got[name], q["scale"], q["zero_point"]).ravel()
            f = np.asarray(expected[name], np.float32).ravel()
            if y.size != f.size:
                raise DlaError(
                    NvError.BadValue,
                    f"--compare-fp32: output '{name}' has {y.size} values, the float model's {f.size}",
                )
            diff = np.abs(y - f)
            scale = float(np.abs(f).max()) or 1.0
            top = int(np.argmax(y) == np.argmax(f)) if f.size > 1 else -1
            errors[name].append(
                (
                    float(diff.max()),
                    float(diff.mean()),
                    float(diff.max()) / q["scale"],
                    float(diff.max()) / scale,
                    top,
                )
            )
    print(
        f"INT8 {args.model} ({config}) against FP32 {args.compare_fp32}, {len(samples)} input(s):", file=text
    )
    for name, rows in errors.items():
        a = np.asarray(rows)
        line = (
            f"output {name}: max |error| {a[:, 0].max():.6g} ({a[:, 2].max():.2f} steps), mean |error| "
            f"{a[:, 1].mean():.6g}, max relative {a[:, 3].max():.4f}"
        )
        if a[0, 4] >= 0:
            line += f", top-1 agreement {int(a[:, 4].sum())}/{len(rows)}"
        print(line, file=text)
    return 0
