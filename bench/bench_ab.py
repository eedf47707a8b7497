"""Two pydla source trees (this one and --base, e.g. a worktree of an earlier commit) on the networks of
bench_session.py, interleaved: one worker process per tree, each with the same network, inputs and
onnxruntime session, taking turns block by block, so that both see the same load on a shared
machine (runs minutes apart do not: onnxruntime's own time moved 1.2-9.9 ms between such runs of
MobileNet-v3-small here).

Per network: each tree's median Session.run and onnxruntime run (each worker times its own
onnxruntime session in the same blocks), the ratio pydla / onnxruntime for each, and after / before.

The two sides may also be one tree under two environments: ``--base . --base-env
PYDLA_BLAS_THREADS=2 --env PYDLA_BLAS_THREADS=auto`` (each KEY=VALUE set in that side's worker; the
BLAS library's own thread count, OPENBLAS_NUM_THREADS, is --threads on both sides).

Run: python bench/bench_ab.py --base /path/to/other/tree [--nets NAME,...] [--size N] [--repeats 7]
     [--block 3] [--threads 1] [--base-env KEY=VALUE ...] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, {bench!r})
import bench_session as b
import numpy as np
import onnxruntime as ort
import pydla
name, size, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
build, default, _ = b.NETWORKS[name]
size = size or default
model = build(size)
feeds, shapes = b.feeds_of(name, model, size)
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.add_session_config_entry("session.intra_op.allow_spinning", "0")
ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
sess = pydla.Session(model, input_shapes=shapes or None)
ours, theirs = next(iter(sess.run(feeds).values())), ref.run(None, feeds)[0]
scale = float(np.abs(theirs).max())
np.testing.assert_allclose(ours, theirs, rtol=b.RTOL, atol=b.RTOL * scale)
print(json.dumps({{"ready": pydla.__file__}}), flush=True)
for line in sys.stdin:
    block = int(line)
    out = {{}}
    for who, fn in (("pydla", lambda: sess.run(feeds)), ("onnxruntime", lambda: ref.run(None, feeds))):
        fn()
        ts = []
        for _ in range(block):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        out[who] = ts
    print(json.dumps(out), flush=True)
sess.close()
"""


def _worker(tree: Path, name: str, size: int, threads: int, extra: dict[str, str]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS=str(threads), **extra)
    env.setdefault("PYDLA_CACHE_DIR", tempfile.mkdtemp(prefix="pydla-ab-"))
    command = [sys.executable, "-c", WORKER.format(bench=str(HERE)), name, str(size), str(threads)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            cwd="/")
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline() or '{"ready": null}')
    if not ready.get("ready"):
        raise SystemExit(f"{name}: the worker for {tree} did not start")
    return proc


def compare(name: str, size: int, trees: dict[str, Path], repeats: int, block: int, threads: int,
            envs: dict[str, dict[str, str]] | None = None) -> None:
    envs = envs or {}
    procs = {who: _worker(tree, name, size, threads, envs.get(who, {})) for who, tree in trees.items()}
    times: dict[str, dict[str, list[float]]] = {who: {"pydla": [], "onnxruntime": []} for who in trees}
    try:
        for _ in range(repeats):
            for who, proc in procs.items():  # one block each, in turn: the other worker waits
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{block}\n")
                proc.stdin.flush()
                result: dict[str, Any] = json.loads(proc.stdout.readline())
                for side in ("pydla", "onnxruntime"):
                    times[who][side] += result[side]
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    med = {who: {side: statistics.median(ts) * 1e3 for side, ts in sides.items()}
           for who, sides in times.items()}
    ratio = {who: m["pydla"] / m["onnxruntime"] for who, m in med.items()}
    print(f"{name} {size or 'default'}:")
    for who in trees:
        print(f"  {who:6} pydla {med[who]['pydla']:8.2f} ms  onnxruntime {med[who]['onnxruntime']:8.2f} ms  "
              f"ratio {ratio[who]:6.2f}x")
    print(f"  after / before: pydla {med['after']['pydla'] / med['before']['pydla']:.3f}, "
          f"ratio {ratio['after'] / ratio['before']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, type=Path, help="the other pydla source tree (before)")
    parser.add_argument("--nets", default="mobilenetv2,mobilenetv3small,resnet18,squeezenet11,encoder")
    parser.add_argument("--size", type=int, default=0, help="input size for every network (default: each's)")
    parser.add_argument("--repeats", type=int, default=7, help="blocks per tree")
    parser.add_argument("--block", type=int, default=3, help="timed runs per block and side")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime's and BLAS's threads")
    parser.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable of the base's worker (repeatable)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable of this tree's worker (repeatable)")
    args = parser.parse_args()
    if not (args.base / "pydla" / "__init__.py").is_file():
        parser.error(f"--base {args.base}: no pydla/__init__.py there")
    envs: dict[str, dict[str, str]] = {}
    for who, pairs in (("before", args.base_env), ("after", args.env)):
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                parser.error(f"{pair!r}: expected KEY=VALUE")
            envs.setdefault(who, {})[key] = value
    trees = {"before": args.base.resolve(), "after": HERE.parent}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; BLAS threads {args.threads}; "
          f"before {envs.get('before', {})}, after {envs.get('after', {})}")
    for name in [n.strip() for n in args.nets.split(",") if n.strip()]:
        compare(name, args.size, trees, args.repeats, args.block, args.threads, envs)


if __name__ == "__main__":
    main()
