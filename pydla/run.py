"""``pydla run``: run a loadable or an ONNX model on the virtual device from the command line.

It loads the model once, runs ``--warmup`` untimed runs, then ``--iterations`` timed ones, and
reports the last run's outputs, the load time and the latency (median, p90, min, max; throughput
only over several runs). ``--json`` prints the same as one JSON object on stdout, and everything
else on stderr, so that a script can read stdout as it is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pydla.compiler.input_shapes import batch_note, batch_of_one
from pydla.errors import DlaError, NvError, file_error
from pydla.files import check_output, read_head
from pydla.run_inputs import (
    INT_HIGH,
    INT_LOW,
    index_limits,
    name_inputs,
    output_file_name,
    random_input,
    read_inputs,
    shape_needed,
)

__all__ = ["random_input", "register"]


def register(commands: Any) -> None:
    p = commands.add_parser(
        "run", help="run a model (.dla or .onnx) and report its outputs and latency",
        description="Run a loadable, or an ONNX model (compiled on the fly and cached), on the "
                    "virtual device. Inputs come from .npy files, or are random when omitted. "
                    "Reports each output (dtype, shape, min, max, mean), the load time and the "
                    "latency of the timed runs.")
    p.add_argument("model", type=Path, metavar="MODEL.dla|MODEL.onnx")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input from a .npy file (repeatable; FILE.npy alone for a model of one input); an "
                        "input with dynamic dimensions takes the file's shape; random inputs otherwise")
    p.add_argument("--output-dir", type=Path, metavar="DIR", help="write each output as NAME.npy here")
    p.add_argument("--iterations", type=int, default=1, metavar="N",
                   help="time N runs and report median, p90, min and max latency, and with N > 1 the "
                        "throughput (default 1)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="untimed runs before the timed ones (default: 1 when --iterations > 1, else 0)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (model, inputs, outputs, load_ms, latency_ms, "
                        "throughput, iterations, warmup, port) and everything else on stderr")
    p.add_argument("--port", default=None, metavar="inprocess|linux:DIR",
                   help="portability layer: inprocess, or linux:DIR for the KMD daemon serving DIR "
                        "(default: $PYDLA_PORT, else inprocess)")
    from pydla.target.config import bundled_configs

    p.add_argument("--config", default=None,
                   help=f"device configuration: {', '.join(bundled_configs())} or a JSON file "
                        "(default: full; nv_full for an NVDLA Loadable)")
    p.add_argument("--dump-image", type=Path, metavar="DIR",
                   help="for an NVDLA Loadable: write output i as DIR/o_<i:06d>.dimg, the image "
                        "NVIDIA's runtime application writes")
    p.add_argument("--device", type=int, default=0, help="device instance")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="for an ONNX model: the whole shape of input NAME, sizing its symbolic dimensions "
                        "(batch, sequence), e.g. --input-shape input_ids=1,128 (repeatable); for a "
                        "loadable it must be the shape compiled in")
    p.add_argument("--trace", type=Path, metavar="FILE.json",
                   help="write a Perfetto / Chrome trace of the timed runs: the device's blocks and compute "
                        "units, the host's calls, CPU runs and fence waits on one timeline (open it at "
                        "https://ui.perfetto.dev)")
    p.add_argument("--trace-events", default=None, metavar="CLASS,...",
                   help="the device's event classes a trace records: task, layer, interrupt, error, log, "
                        "reg_write (default: all but reg_write, one event per register write)")
    p.add_argument("--trace-ring", type=Path, metavar="FILE",
                   help="also save the device's trace ring as read, for 'pydla trace FILE'")
    p.add_argument("--profile", action="store_true",
                   help="print a per-operation profile of the timed runs: each operation's block, shape and "
                        "device time, and each step's host overhead, sorted by cost")
    p.add_argument("--compare-fp32", type=Path, metavar="MODEL.onnx",
                   help="an INT8 NVDLA Loadable against the float model it was compiled from: each "
                        "output's error (--input: float arrays, a batch of N is N runs; else --iterations "
                        "random inputs)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random inputs (floats: standard normal; integers: within the axis they "
                        "index (a Gather's), else uniform in -100..100, 0..200 unsigned; bools: half true)")
    p.set_defaults(func=_run)


def trace_mask(classes: str | None) -> int:
    """``--trace-events``: a comma-separated list of trace_class_e names (any case), as a mask."""
    from pydla.deviceapi.generated import dla_regs as R
    from pydla.trace.capture import DEFAULT_MASK

    if classes is None:
        return DEFAULT_MASK
    known = {c.name.lower(): int(c) for c in R.trace_class_e}
    mask = 0
    for name in filter(None, (n.strip().lower() for n in classes.split(","))):
        if name not in known:
            raise DlaError(NvError.BadParameter, f"--trace-events {classes}: '{name}' is not one of "
                                                 f"{', '.join(known)}")
        mask |= known[name]
    if not mask:
        raise DlaError(NvError.BadParameter,
                       f"--trace-events {classes!r}: name at least one of {', '.join(known)}")
    return mask


def _number(value: Any) -> float | int | bool | str:
    """A statistic as JSON: a bool or int stays one; NaN and infinities become the strings "NaN",
    "Infinity" and "-Infinity" (as in protobuf's JSON mapping), since JSON has no such numbers."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def latency_stats(seconds: list[float]) -> dict[str, float]:
    """Median, p90 (nearest rank), min and max of ``seconds``, in milliseconds."""
    ms = sorted(t * 1e3 for t in seconds)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return {"median": statistics.median(ms), "p90": p90, "min": ms[0], "max": ms[-1]}


def check_outputs(args: argparse.Namespace,
                  given: list[tuple[str | None, np.ndarray, str]]) -> dict[str, Any]:
    """What the runs write is checked before them (a long run should not fail at its end), and none
    of it is one of the command's inputs: the model, an --input file, another output. Returns the
    files not to write over, {what it is: path}."""
    inputs: dict[str, Any] = {"the model being run": args.model}
    for name, _, file in given:
        inputs[f"the file of --input {name}" if name else "the --input file"] = file
    if args.output_dir is not None:
        if args.output_dir.exists() and not args.output_dir.is_dir():
            raise DlaError(NvError.FileWriteFailed,
                           f"--output-dir {args.output_dir}: a file, not a directory")
        try:
            args.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise file_error(args.output_dir, e, flag="--output-dir", writing=True) from e
    if args.trace is not None:
        check_output(args.trace, "--trace", inputs)
        inputs["the --trace file"] = args.trace
    if args.trace_ring is not None:
        check_output(args.trace_ring, "--trace-ring", inputs)
        inputs["the --trace-ring file"] = args.trace_ring
    return inputs


def check_output_files(args: argparse.Namespace, outputs: list[Any], inputs: dict[str, Any]) -> None:
    """``--output-dir``'s files (named after the model's outputs, known once it is open) are none of
    the command's other files."""
    for t in outputs:
        check_output(args.output_dir / f"{output_file_name(t.name)}.npy", f"--output-dir: output {t.name}:",
                     inputs)


def _open(args: argparse.Namespace, shapes: dict[str, tuple[int, ...]]) -> Any:
    from pydla.platform import check_port_spec
    from pydla.session import Session

    if args.port is not None:
        check_port_spec(args.port, "--port")  # named as typed (the Session would say "port")

    progress = None
    if sys.stderr.isatty():  # compiling a large ONNX model takes a while: show it, as pydla compile does
        from pydla.compiler.progress import TerminalProgress

        progress = TerminalProgress(sys.stderr)
    try:
        return Session(args.model, port=args.port, config=args.config, device=args.device, progress=progress,
                       input_shapes=shapes)
    finally:
        if progress is not None:
            progress.close()


def _feeds(args: argparse.Namespace, sess: Any, given: list[tuple[str | None, np.ndarray, str]],
           text: Any) -> tuple[dict[str, np.ndarray], list[dict[str, Any]], list[str]]:
    """Each input: its file's array, or a random one (integers that index an axis drawn within it);
    the report's description of each; the inputs of random integers indexing nothing known."""
    files = name_inputs(given, sess.inputs)
    random = [t for t in sess.inputs if t.name not in files]
    sizes: dict[str, tuple[int, ...]] = {}
    for t in random:  # an input whose only dynamic dimension is the batch runs with batch 1, saying so
        found = batch_of_one(t.shape) if t.dynamic else t.sizes
        if found is None:
            raise shape_needed(t)
        if t.dynamic:
            print(batch_note(t.name, t.shape, "running"), file=text)
        sizes[t.name] = found
    limits = {}
    if any(np.dtype(t.dtype).kind in "iu" for t in random) and str(args.model).lower().endswith(".onnx"):
        import onnx

        limits = index_limits(onnx.load(str(args.model), load_external_data=False))
    rng = np.random.default_rng(args.seed)
    feeds, inputs, random_ints = {}, [], []
    for t in sess.inputs:
        if t.name in files:
            feeds[t.name], source = files[t.name]
        else:
            dtype = np.dtype(t.dtype)
            limit = limits.get(t.name)
            feeds[t.name], source = random_input(rng, sizes[t.name], dtype, limit), "random"
            values = ""
            if dtype.kind in "iu" and limit is not None:
                values = f" in 0..{limit - 1} (indices of an axis of {limit})"
            elif dtype.kind in "iu":
                low, high = (0, INT_HIGH - INT_LOW) if dtype.kind == "u" else (INT_LOW, INT_HIGH)
                values = f" in {low}..{high}"
                random_ints.append(t.name)
            print(f"input {t.name}: random {t.dtype} {sizes[t.name]}{values}", file=text)
        inputs.append({"name": t.name, "shape": list(feeds[t.name].shape),
                       "dtype": str(feeds[t.name].dtype), "source": source})
    return feeds, inputs, random_ints


def _runs(args: argparse.Namespace, sess: Any, feeds: dict[str, np.ndarray], warmup: int, mask: int,
          text: Any) -> tuple[list[float], dict[str, np.ndarray]]:
    """The warm-up runs, then the timed ones (traced when asked): their times and the last outputs."""
    from pydla.trace.capture import Capture

    # What was said of the inputs shows before the runs, however long they take: a pipe (`| tee`, a
    # test reading the first line) buffers stdout in blocks until the end otherwise.
    text.flush()
    for _ in range(warmup):
        sess.run(feeds)
    traced_wanted = args.trace is not None or args.trace_ring is not None or args.profile
    capture = Capture(sess.runtime, mask=mask) if traced_wanted else None
    times = []
    outputs: dict[str, np.ndarray] = {}
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        outputs = sess.run(feeds)
        times.append(time.perf_counter() - t0)
    if capture is not None:
        traced = capture.finish()
        if args.trace is not None:
            traced.write_chrome(args.trace)
            print(f"trace of {len(times)} run(s) written to {args.trace} ({len(traced.ops)} device "
                  f"operations; open it at https://ui.perfetto.dev)", file=text)
        if args.trace_ring is not None:
            traced.write_ring(args.trace_ring)
        if args.profile:
            print(traced.profile_text(), file=text)
    return times, outputs


def _run(args: argparse.Namespace) -> int:
    from pydla.compiler.input_shapes import parse_input_shapes

    shapes = parse_input_shapes(args.input_shape)
    if args.iterations < 1:
        raise DlaError(NvError.BadParameter, f"--iterations {args.iterations}: at least 1")
    warmup = args.warmup if args.warmup is not None else (1 if args.iterations > 1 else 0)
    if warmup < 0:
        raise DlaError(NvError.BadParameter, f"--warmup {warmup}: 0 or more")
    # With --json, stdout carries the JSON object alone; what a person reads goes to stderr.
    text = sys.stderr if args.json else sys.stdout
    if args.seed < 0:
        raise DlaError(NvError.BadParameter, f"--seed {args.seed}: 0 or more")
    head = read_head(args.model)  # a missing file, a directory: said before anything else
    from pydla.loadable.nvdla.reader import looks_like_nvdla_loadable

    if looks_like_nvdla_loadable(head) and args.compare_fp32 is not None:
        from pydla.run_compare import compare_fp32

        return compare_fp32(args, text)
    if looks_like_nvdla_loadable(head):
        from pydla.run_nvdla import run_nvdla

        return run_nvdla(args, text)
    if args.compare_fp32 is not None:
        raise DlaError(NvError.BadParameter, f"--compare-fp32: only for an INT8 NVDLA Loadable; "
                                             f"{args.model} is not one")
    if args.dump_image is not None:
        raise DlaError(NvError.BadParameter, f"--dump-image {args.dump_image}: only for an NVDLA Loadable; "
                                             f"{args.model} is not one (use --output-dir)")
    args.config = args.config or "full"
    given = read_inputs(args.input)
    protected = check_outputs(args, given)
    mask = trace_mask(args.trace_events)
    import pydla.session  # noqa: F401 (imported before the load is timed, as onnx for an ONNX model)

    if args.model.suffix.lower() == ".onnx":
        from pydla.compiler.onnx_extra import import_onnx

        import_onnx()  # and here is where its absence is said
    t0 = time.perf_counter()
    sess = _open(args, shapes)
    with sess:
        if args.output_dir is not None:
            check_output_files(args, sess.outputs, protected)
        feeds, inputs, random_ints = _feeds(args, sess, given, text)
        if sess.dynamic:  # compiled for the shapes of the inputs now, not in the first run
            sess.prepare({t.name: feeds[t.name].shape for t in sess.inputs if t.dynamic})
        load_ms = (time.perf_counter() - t0) * 1e3
        try:
            times, outputs = _runs(args, sess, feeds, warmup, mask, text)
        except DlaError as e:
            if not random_ints:
                raise
            hint = "; ".join(f"input '{n}' was random integers in {INT_LOW}..{INT_HIGH}: if it holds indices "
                             f"or ids, give its values with --input {n}=FILE.npy" for n in random_ints)
            raise DlaError(e.code, f"{e.message} ({hint})") from e
    print(f"loaded in {load_ms:.1f} ms", file=text)
    results = []
    for name, value in outputs.items():
        stats = ({"min": _number(value.min()), "max": _number(value.max()), "mean": _number(value.mean())}
                 if value.size else {"min": None, "max": None, "mean": None})
        shown = (f"  min {value.min():.6g}  max {value.max():.6g}  mean {value.mean():.6g}" if value.size
                 else "  (empty)")
        print(f"output {name}: {value.dtype} {value.shape}{shown}", file=text)
        path = None
        if args.output_dir is not None:
            path = args.output_dir / f"{output_file_name(name)}.npy"
            try:
                np.save(path, value)
            except OSError as e:
                raise file_error(path, e, flag=f"output {name}:", writing=True) from e
            print(f"  written to {path}", file=text)
        results.append({"name": name, "shape": list(value.shape), "dtype": str(value.dtype), **stats,
                        "file": None if path is None else str(path)})
    latency = latency_stats(times)
    # One run's latency says nothing about throughput (no pipelining, a cold cache...): over several
    # runs, throughput is runs per second of timed wall time.
    throughput = len(times) / sum(times) if len(times) > 1 and sum(times) > 0 else None
    after = f" (after {warmup} untimed warm-up run{'s' if warmup != 1 else ''})" if warmup else ""
    if len(times) > 1:
        ms = {k: f"{v:.2f} ms" for k, v in latency.items()}
        print(f"latency over {len(times)} run(s): median {ms['median']}, p90 {ms['p90']}, min {ms['min']}, "
              f"max {ms['max']}{after}", file=text)
        if throughput is not None:
            print(f"throughput: {throughput:.1f} runs/s", file=text)
    else:
        print(f"latency of 1 run: {latency['median']:.2f} ms{after} (--iterations N for median, p90 and "
              "throughput)", file=text)
    if args.json:
        report = {"model": str(args.model), "config": args.config, "device": args.device,
                  "port": args.port or os.environ.get("PYDLA_PORT") or "inprocess",
                  "inputs": inputs, "outputs": results, "load_ms": load_ms, "latency_ms": latency,
                  "throughput": throughput, "iterations": args.iterations, "warmup": warmup}
        print(json.dumps(report))
    return 0
