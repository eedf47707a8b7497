"""``pydla run``: run a loadable or an ONNX model on the virtual device from the command line."""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError


def random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A random tensor of ``dtype``: values a network of that type can take without overflowing at
    once (integers in -100..100, or 0..200 unsigned)."""
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        low = 0 if dtype.kind == "u" else -100
        return rng.integers(low, low + 200, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def output_file_name(name: str) -> str:
    """A tensor name as a file name: characters other than letters, digits, '.', '_' and '-' (the
    '/' and ':' of exported names, a '..') become '_', so every output lands in the output directory."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return safe or "_"


def register(commands: Any) -> None:
    p = commands.add_parser(
        "run", help="run a model (.dla or .onnx) and report its outputs and latency",
        description="Run a loadable, or an ONNX model (compiled on the fly and cached), on the "
                    "virtual device. Inputs come from .npy files, or are random when omitted.")
    p.add_argument("model", type=Path, metavar="MODEL.dla|MODEL.onnx")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input from a .npy file (repeatable); random inputs otherwise")
    p.add_argument("--output-dir", type=Path, metavar="DIR", help="write each output as NAME.npy here")
    p.add_argument("--iterations", type=int, default=1, metavar="N",
                   help="run N times and report median and p90 latency and throughput")
    p.add_argument("--port", default=None, metavar="inprocess|linux:DIR",
                   help="portability layer: inprocess, or linux:DIR for the KMD daemon serving DIR "
                        "(default: $PYDLA_PORT, else inprocess)")
    p.add_argument("--config", default="full", help="device configuration: full, small or a JSON file")
    p.add_argument("--device", type=int, default=0, help="device instance")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random inputs (floats: standard normal; integers: uniform in "
                        "-100..100, 0..200 unsigned; bools: half true)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pydla.session import Session

    if args.iterations < 1:
        raise DlaError(NvError.BadParameter, f"--iterations {args.iterations}: at least 1")
    feeds_given: dict[str, np.ndarray] = {}
    for item in args.input:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise DlaError(NvError.BadParameter, f"--input {item!r}: write NAME=FILE.npy")
        try:
            feeds_given[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DlaError(NvError.FileReadFailed, f"--input {name}: cannot read {file}: {e}") from e
    if args.output_dir is not None:  # before the run: a long run should not fail at its end
        try:
            args.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DlaError(NvError.FileWriteFailed,
                           f"--output-dir {args.output_dir}: {e.strerror or e}") from e
    t0 = time.perf_counter()
    with Session(args.model, port=args.port, config=args.config, device=args.device) as sess:
        load_ms = (time.perf_counter() - t0) * 1e3
        names = [t.name for t in sess.inputs]
        for name in feeds_given:
            if name not in names:
                raise DlaError(NvError.BadParameter, f"--input {name}: the model has no input '{name}' "
                                                     f"(its inputs: {', '.join(names)})")
        rng = np.random.default_rng(args.seed)
        feeds = {}
        for t in sess.inputs:
            if t.name in feeds_given:
                feeds[t.name] = feeds_given[t.name]
            else:
                feeds[t.name] = random_input(rng, t.shape, np.dtype(t.dtype))
                print(f"input {t.name}: random {t.dtype} {t.shape}")
        times = []
        for _ in range(args.iterations):
            t0 = time.perf_counter()
            outputs = sess.run(feeds)
            times.append(time.perf_counter() - t0)
    print(f"loaded in {load_ms:.1f} ms")
    for name, value in outputs.items():
        stats = (f"  min {value.min():.6g}  max {value.max():.6g}  mean {value.mean():.6g}" if value.size
                 else "  (empty)")
        print(f"output {name}: {value.dtype} {value.shape}{stats}")
        if args.output_dir is not None:
            path = args.output_dir / f"{output_file_name(name)}.npy"
            try:
                np.save(path, value)
            except OSError as e:
                raise DlaError(NvError.FileWriteFailed, f"output {name}: cannot write {path}: {e}") from e
            print(f"  written to {path}")
    ms = sorted(t * 1e3 for t in times)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    print(f"latency over {len(ms)} run(s): median {statistics.median(ms):.2f} ms, p90 {p90:.2f} ms, "
          f"throughput {1000 / statistics.median(ms):.1f} runs/s")
    return 0
