"""``pydla demo``: a small convolutional network through the whole stack, checked against a reference.

The network is built here with onnx.helper and random weights (no download): two convolutions with
batch norm and ReLU, a residual add, max pooling, global average pooling, a fully connected layer
and a softmax (which runs on the CPU). It is compiled, loaded into a runtime on the in-process port,
bound, submitted, and its output compared with onnxruntime (or onnx's reference evaluator when
onnxruntime is not installed). ``examples/demo_model.py`` writes the same model to a file.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from pydla.errors import DlaError, NvError
from pydla.hw.blas import describe as blas_kernels

TOLERANCE = 1e-4
NEXT_READING = "docs/guide/applications.md"  # what the demo's last line points to (a test checks it is there)


def build_demo_model(seed: int = 0) -> Any:
    """The demo network as an ``onnx.ModelProto`` (batch 1, 3x32x32 input, 10 classes)."""
    from onnx import TensorProto, helper, numpy_helper

    if type(seed) is not int or seed < 0:
        raise DlaError(NvError.BadParameter, f"build_demo_model: seed {seed!r}: an integer, 0 or more")
    rng = np.random.default_rng(seed)

    def t(name: str, *shape: int, scale: float = 0.3, positive: bool = False) -> Any:
        value = rng.standard_normal(shape).astype(np.float32) * scale
        return numpy_helper.from_array(np.abs(value) + 0.5 if positive else value, name)

    inits = [t("w1", 16, 3, 3, 3), t("b1", 16), t("g1", 16, positive=True), t("be1", 16), t("m1", 16),
             t("v1", 16, positive=True), t("w2", 16, 16, 3, 3, scale=0.1), t("g2", 16, positive=True),
             t("be2", 16), t("m2", 16), t("v2", 16, positive=True), t("fc", 10, 16), t("fcb", 10)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "g1", "be1", "m1", "v1"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("BatchNormalization", ["c2", "g2", "be2", "m2", "v2"], ["n2"], name="bn2"),
        helper.make_node("Add", ["n2", "r1"], ["a2"], name="residual"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "pydla-demo",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="pydla demo")
    model.ir_version = 8
    return model


def reference(model: Any, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, str]:
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        outputs: Any = ReferenceEvaluator(model).run(None, feeds)
        return np.asarray(outputs[0]), "onnx.reference"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, feeds)[0]), "onnxruntime"


def register(commands: Any) -> None:
    p = commands.add_parser(
        "demo", help="compile a small network, run it through the whole stack, check it",
        description="Build a small CNN with random weights, compile it, run it on the virtual "
                    "device through runtime, portability layer and KMD, and compare the result with "
                    "onnxruntime. Exit code 0 only when the numbers match. Needs the onnx extra.")
    from pydla.target.config import bundled_configs

    p.add_argument("--config", default="full",
                   help=f"device configuration: {', '.join(bundled_configs())} or a JSON file")
    p.add_argument("--seed", type=int, default=0, help="weights and input seed")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise DlaError(NvError.BadParameter, f"--seed {args.seed}: 0 or more")
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        raise DlaError(NvError.NotSupported,
                       "pydla demo needs the onnx extra: pip install 'pydla[onnx]'") from e
    import pydla
    from pydla.compiler.api import compile_model

    stages: list[tuple[str, float]] = []

    def stage(name: str, t0: float) -> None:
        stages.append((name, (time.perf_counter() - t0) * 1e3))

    t0 = time.perf_counter()
    model = build_demo_model(args.seed)
    stage("build model", t0)
    t0 = time.perf_counter()
    compiled = compile_model(model, config=args.config)
    stage("compile", t0)
    x = np.random.default_rng(args.seed + 1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with pydla.createRuntime(config=args.config) as rt:
        t0 = time.perf_counter()
        rt.load(compiled.blob)
        stage("load", t0)
        t0 = time.perf_counter()
        d_in, d_out = rt.getInputTensorDesc(0), rt.getOutputTensorDesc(0)
        mem_in, mem_out = rt.allocateSystemMemory(d_in.size), rt.allocateSystemMemory(d_out.size)
        mem_in.array(np.float32, d_in.dims)[...] = x
        rt.bindInputTensor(0, mem_in)
        rt.bindOutputTensor(0, mem_out)
        stage("bind", t0)
        t0 = time.perf_counter()
        (done,) = rt.submitNonBlocking()
        stage("submit", t0)
        t0 = time.perf_counter()
        done.wait(60_000)
        stage("wait", t0)
        got = mem_out.array(np.float32, d_out.dims).copy()
    want, against = reference(model, {"input": x})
    error = float(np.abs(got - want).max())
    ok = error <= TOLERANCE and got.shape == want.shape

    print(f"pydla {pydla.__version__} demo: a small CNN (conv+bn+relu x2, residual add, max pool, global "
          f"average pool, fully connected, softmax) on the '{args.config}' virtual device")
    print("\nstages:")
    for name, ms in stages:
        print(f"  {name:<12} {ms:9.2f} ms")
    ops = ", ".join(f"{block} {n}" for block, n in sorted(compiled.operations.items()))
    print(f"\ndevice operations: {ops}  ({compiled.steps} steps; {compiled.memory.report()})")
    print(f"device BLAS: {blas_kernels()}")
    print(f"output: {d_out.name} {d_out.dims}, top class {int(got.argmax())} "
          f"(p = {float(got.max()):.4f})")
    print(f"max |pydla - {against}| = {error:.2e} (tolerance {TOLERANCE:.0e}): {'OK' if ok else 'MISMATCH'}")
    print(f"\nnext: pydla compile your_model.onnx -o model.dla; pydla info model.dla; pydla.Session or "
          f"pydla.createRuntime() in Python ({NEXT_READING}), README: 'The runtime API'")
    return 0 if ok else 1
