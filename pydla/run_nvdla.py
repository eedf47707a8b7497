"""``pydla run`` for an NVDLA Loadable (FlatBuffers, NVIDIA's compiler's output), as NVIDIA's runtime
application runs one: each input a buffer of its bufferSize (zero, or the bytes of its ``--input``
.npy array from offset 0: the tensor's own layout), each output a zeroed buffer, submit; outputs are
reported as their image (channel, height, width), ``--dump-image DIR`` writes them as the
application's ``o_000000.dimg`` ... and ``--output-dir`` as NAME.npy.

Usage: ``pydla run CDP_L0_0_fbuf --config nv_full --dump-image out/``
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError, file_error
from pydla.run_inputs import output_file_name, read_inputs

DEFAULT_CONFIG = "nv_full"


def _inputs(args: argparse.Namespace, rt: Any) -> dict[int, bytes]:
    names = [rt.getInputTensorDesc(i).name for i in range(rt.getNumInputTensors())]
    given: dict[int, bytes] = {}
    for name, array, file in read_inputs(args.input):
        if name is None:
            if len(names) != 1:
                raise DlaError(NvError.BadParameter, f"--input {file}: the loadable has {len(names)} inputs "
                                                     f"({', '.join(names) or 'none'}): write NAME=FILE.npy")
            index = 0
        elif name in names:
            index = names.index(name)
        else:
            raise DlaError(NvError.BadParameter, f"--input {name}: the loadable's inputs are "
                                                 f"{', '.join(names) or 'none'}")
        given[index] = np.ascontiguousarray(array).tobytes()
    return given


def run_nvdla(args: argparse.Namespace, text: Any) -> int:
    """``pydla run`` of an NVDLA Loadable; ``text`` is where the report goes."""
    import pydla
    from pydla.loadable.nvdla.dimg import read_dimg
    from pydla.umd.nvdla_app import run_app

    config = args.config or DEFAULT_CONFIG
    for flag, value in (("--dump-image", args.dump_image), ("--output-dir", args.output_dir)):
        if value is not None:
            try:
                Path(value).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise file_error(value, e, flag=flag, writing=True) from e
    t0 = time.perf_counter()
    with pydla.createRuntime(args.port, config=config, device=args.device) as rt:
        rt.load(args.model)
        load_ms = (time.perf_counter() - t0) * 1e3
        given = _inputs(args, rt)
        for _ in range(args.warmup or 0):
            run_app(rt, given)
        times, outputs = [], []
        for _ in range(args.iterations):
            t1 = time.perf_counter()
            outputs = run_app(rt, given)
            times.append(time.perf_counter() - t1)
    print(f"loaded in {load_ms:.1f} ms (NVDLA Loadable, configuration {config})", file=text)
    report = []
    for i, (desc, image) in enumerate(outputs):
        img = read_dimg(image)
        arr = img.array()
        print(f"output {desc.name}: {arr.dtype} {arr.shape} (image format {img.format.name})"
              + (f"  min {arr.min():.6g}  max {arr.max():.6g}" if arr.size else ""), file=text)
        files = {}
        if args.dump_image is not None:
            path = Path(args.dump_image) / f"o_{i:06d}.dimg"
            _write(path, image, "--dump-image")
            files["image"] = str(path)
            print(f"  image written to {path}", file=text)
        if args.output_dir is not None:
            path = Path(args.output_dir) / f"{_safe(desc.name)}.npy"
            try:
                np.save(path, arr)
            except OSError as e:
                raise file_error(path, e, flag="--output-dir", writing=True) from e
            files["array"] = str(path)
        report.append({"name": desc.name, "shape": list(arr.shape), "dtype": str(arr.dtype), **files})
    median = sorted(times)[len(times) // 2] * 1e3
    print(f"latency over {len(times)} run(s): median {median:.2f} ms", file=text)
    if args.json:
        print(json.dumps({"model": str(args.model), "config": config, "device": args.device,
                          "port": args.port or os.environ.get("PYDLA_PORT") or "inprocess",
                          "outputs": report, "load_ms": load_ms, "latency_ms": {"median": median},
                          "iterations": args.iterations}))
    return 0


def _safe(name: str) -> str:

    return output_file_name(name)


def _write(path: Path, data: bytes, flag: str) -> None:
    try:
        path.write_bytes(data)
    except OSError as e:
        raise file_error(path, e, flag=flag, writing=True) from e
